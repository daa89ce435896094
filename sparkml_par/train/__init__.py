"""Distributed training: the loop run by every Horovod rank and its building blocks."""
