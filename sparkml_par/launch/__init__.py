"""Run a Python function on N Horovod ranks: the tasks of one barrier-mode Spark stage, or local processes.

    results = Launcher(num_proc=2).run(fn, *args, **kwargs)   # [rank 0's return value, rank 1's, ...]

Inside `fn`, Horovod is initialized (`import horovod.torch as hvd; hvd.rank()`), and
`current_rank().report({...})` sends progress records to the driver while the stage runs. The launcher
itself is in `launcher.py`; the other modules are its parts (rank plan, channel, supervisor, slots).
"""

from sparkml_par.launch.launcher import Launcher
from sparkml_par.launch.rank import current_rank
from sparkml_par.launch.supervisor import LaunchError

__all__ = ["Launcher", "current_rank", "LaunchError"]
