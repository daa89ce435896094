"""Any override a user can type: `sparkml-par config` echoes a config that loads back the same, or says one error.

Hypothesis draws `key=value` overrides of the quickstart config: real keys, near-miss and unknown keys, and
values of every YAML kind (numbers out of range, booleans, lists, mappings, null, text with spaces, quotes,
unicode and `${ENV}` references, paths with spaces and non-ASCII letters). Each goes through the command's own
entry point in this process. Accepted: exit code 0, and the printed YAML loads back to the same config.
Refused: exit code 2 and one `error:` line naming the key. Never a traceback.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import event, given, settings
from hypothesis import strategies as st
from property_budget import examples

from sparkml_par import cli
from sparkml_par.config import Config, describe, load_config

QUICKSTART = str(Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml")
DEFAULTS = {key: default for key, default, _ in describe(Config)}
KEYS = list(DEFAULTS)

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=20)
VALUES = st.one_of(
    st.integers(-(2**40), 2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "false", "null", "~", "[]", "{}", "[1, 2]", "{a: 1}", "-1", "0", "1e400", ".nan"]),
    st.sampled_from(["/tmp/dir with space/ünï", "runs/日本/out", "'quoted'", '"x y"', "${HOME}", "${NO_SUCH_VAR}"]),
    TEXT,
)
KEYS_TYPED = st.one_of(
    st.sampled_from(KEYS),
    st.sampled_from(KEYS).map(lambda k: k + "s"),  # a near miss
    st.sampled_from(KEYS).map(lambda k: k.upper()),
    st.from_regex(r"[a-z]{1,6}(\.[a-z_]{1,8}){0,2}", fullmatch=True),
)


@st.composite
def values_of_the_keys_kind(draw) -> str:
    """A real key with a value of its default's kind: a number in or out of its range, a bool, text, a path."""
    key = draw(st.sampled_from(KEYS))
    default = DEFAULTS[key]
    if default in ("True", "False"):
        value = draw(st.sampled_from(["true", "false", "yes", "0"]))
    elif default.lstrip("-").isdigit():
        value = str(draw(st.integers(-2, 10_000)))
    elif default.replace(".", "", 1).replace("e-", "", 1).lstrip("-").isdigit():
        value = repr(draw(st.floats(-1.0, 2.0)))
    elif default.startswith("'"):
        value = draw(st.one_of(st.just(default), TEXT.map(repr), st.sampled_from(["/tmp/dir with space/ünï", "日本"])))
    else:
        value = default.replace("None", "null")
    return f"{key}={value}"


@settings(max_examples=examples(ci=300, deep=5000))
@given(override=st.one_of(st.builds("{}={}".format, KEYS_TYPED, VALUES), values_of_the_keys_kind()))
def test_any_override_is_echoed_or_one_clear_error(override, capsys, tmp_path_factory):
    key = override.partition("=")[0]
    code = cli.main(["config", QUICKSTART, override])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    event("refused" if code == 2 else "accepted")
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert any(part in lines[0] for part in key.split(".")), (override, err)  # the message names the key
        return
    assert code == 0, (override, code, err)
    printed = tmp_path_factory.mktemp("echo") / "config.yaml"
    printed.write_text(out, encoding="utf-8")
    assert load_config(printed) == load_config(QUICKSTART, [override])
