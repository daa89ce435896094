"""How many inputs the property tests draw: a fixed, derandomized budget unless HYPOTHESIS_PROFILE says otherwise.

Profiles (registered and loaded here, by the first test module that imports this one):
- `ci` (the default): derandomized, so every run draws the same inputs; each test's small budget.
- `deep`: random inputs, each test's large budget, for a search on demand.
- `explicit`: the kept `@example`s only (the other tested stacks run these).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
settings.register_profile("deep", parent=settings.get_profile("ci"), derandomize=False)
settings.register_profile("explicit", parent=settings.get_profile("ci"), phases=[Phase.explicit])
settings.load_profile(PROFILE)


def examples(ci: int, deep: int) -> int:
    """A test's number of drawn inputs under the loaded profile."""
    return deep if PROFILE == "deep" else ci
