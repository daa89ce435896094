"""The petastorm patch: petastorm 0.12 made importable on pyarrow >= 15 and numpy 2 by an import hook
(`petastorm_compat`), with the part of petastorm it replaces in `petastorm_pyarrow_compat`."""
