"""petastorm 0.12.1 on pyarrow >= 15 and numpy 2 through an import hook: nothing written into the installed package.

On the stacks that need it (pyarrow >= 15 or numpy 2) importing sparkml_par installs the finder; on the pinned
stack petastorm imports as released. The finder itself is exercised on every stack in a fresh interpreter. That
the edited petastorm reads and writes the project's datasets is what the rest of the suite shows.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparkml_par.compat import petastorm_compat
from sparkml_par.compat.petastorm_compat import COMPAT_SOURCE, EDITS, PetastormEditError, PetastormFinder, edit_source

pytestmark = pytest.mark.stack


def _finder_installed() -> bool:
    return any(isinstance(finder, PetastormFinder) for finder in sys.meta_path)


def test_the_finder_is_installed_exactly_where_the_stack_needs_it():
    assert _finder_installed() == petastorm_compat.needs_compat()
    assert petastorm_compat.install() is None or _finder_installed()
    assert sum(isinstance(finder, PetastormFinder) for finder in sys.meta_path) <= 1  # install() is idempotent


def test_petastorm_imports_edited_in_memory_and_its_files_stay_as_released():
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from sparkml_par.compat.petastorm_compat import PetastormFinder
        if not any(isinstance(f, PetastormFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, PetastormFinder())
        import petastorm.reader, petastorm.utils, petastorm.unischema
        from petastorm import pyarrow_compat
        print(petastorm.reader.pq.__name__)
        print(pyarrow_compat.__file__)
        print("pyarrow.filesystem" in Path(petastorm.utils.__file__).read_text())
        print(petastorm.utils.LocalFileSystem.__module__)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    module, compat_file, released_text, local_filesystem = result.stdout.split()
    assert module == "petastorm.pyarrow_compat"
    assert Path(compat_file) == COMPAT_SOURCE
    assert released_text == "True"  # the installed utils.py still has its released import line
    assert local_filesystem == "petastorm.pyarrow_compat"  # not pyarrow.filesystem's


def test_every_edit_applies_to_the_installed_petastorm():
    package = Path(petastorm_compat.importlib.util.find_spec("petastorm").origin).parent
    for name in dict.fromkeys(name for name, *_ in EDITS):
        edited = edit_source(name, (package / name).read_text())
        assert all(new in edited for edit_name, _, new, _ in EDITS if edit_name == name and new)


def test_a_petastorm_whose_text_differs_fails_to_import_with_the_file_and_the_text():
    released = "from pyarrow import parquet as pq\nfrom pyarrow import parquet as pq\n"
    expected = (
        r"reader.py: 1 occurrence\(s\) of 'from pyarrow import parquet as pq' expected, 2 found(.|\n)*"
        r"fix: pip install --force-reinstall petastorm==0.12.1"
    )
    with pytest.raises(PetastormEditError, match=expected):
        edit_source("reader.py", released)
    assert issubclass(PetastormEditError, ImportError)
