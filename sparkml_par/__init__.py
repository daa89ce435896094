"""sparkml_par: Spark data preparation, barrier-mode Horovod training of PyTorch models, Spark scoring."""

__version__ = "0.1.0"
