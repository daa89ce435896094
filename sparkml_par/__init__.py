"""sparkml_par: Spark data preparation, barrier-mode Horovod training of PyTorch models, Spark scoring."""

from sparkml_par.compat import petastorm_compat

__version__ = "0.1.0"

# Before anything imports petastorm: on pyarrow >= 15 or numpy 2 it imports only with these edits.
petastorm_compat.install()
