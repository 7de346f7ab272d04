"""The TapFinger authors' stored results, typed in from the result files of their code.

Numbers only. Each is from one episode of one seed (42) of the authors' code; JCT in real
steps. ``REFERENCE[experiment][algorithm] = (mean, median, p90, mean tasks in system)``;
``REDUCTION[experiment][baseline] = (mean, median)`` TapFinger's JCT reduction (fractions)
as the authors stored it (computed from unrounded means, so it can differ from the rounded
table in the last digit).
"""

from __future__ import annotations

#: our scenario name -> (reference experiment folder, paper figure)
SCENARIO_TO_EXPERIMENT: dict[str, tuple[str, str]] = {
    "synthetic-3": ("synthetic", "Fig. 5(a,b)"),
    "synthetic-6": ("synthetic_6_agent", "Fig. 5(c,d)"),
    "multi-3": ("multiple-gamma=1", "Fig. 11"),
    "hetero-6": ("hetero_6_agent", "Fig. 12"),
    "testbed-3": ("trace_1000", "Fig. 9 (3 agents)"),
    "testbed-6": ("trace_6_agent_2000", "Fig. 9 (6 agents), Fig. 10"),
    "sjf-3": ("SJF-test", "Fig. 14"),
}

#: our scheduler name -> the reference's algorithm label
SCHEDULER_TO_ALGORITHM: dict[str, str] = {
    "tapfinger": "TapFinger", "optimus": "Optimus", "tiresias": "Tiresias", "random": "Random", "min": "Min",
}

REFERENCE: dict[str, dict[str, tuple[float, float, float, float]]] = {
    "synthetic": {
        "TapFinger": (6.42, 5.0, 11.0, 12.04),
        "Optimus": (8.56, 7.0, 14.0, 15.33),
        "Tiresias": (14.66, 15.0, 24.0, 20.82),
        "Random": (12.84, 10.0, 25.0, 18.79),
        "Min": (12.74, 13.0, 22.0, 19.09),
    },
    "synthetic_6_agent": {
        "TapFinger": (7.31, 6.0, 13.7, 25.51),
        "Optimus": (9.20, 7.0, 14.7, 32.11),
        "Tiresias": (15.05, 15.0, 27.0, 45.12),
        "Random": (13.99, 11.0, 27.0, 43.31),
        "Min": (15.20, 15.0, 26.0, 45.94),
    },
    "multiple-gamma=1": {
        "TapFinger": (4.29, 4.0, 7.0, 10.93),
        "Optimus": (7.73, 6.0, 13.0, 21.16),
        "Tiresias": (7.55, 7.0, 11.0, 19.03),
        "Random": (15.12, 11.0, 30.9, 27.88),
        "Min": (28.82, 25.0, 53.9, 45.32),
    },
    "hetero_6_agent": {
        "TapFinger": (4.87, 4.0, 7.0, 22.17),
        "Optimus": (8.12, 5.0, 13.0, 29.64),
        "Tiresias": (10.79, 7.0, 15.7, 33.09),
        "Random": (23.57, 14.5, 50.0, 62.37),
        "Min": (33.46, 26.0, 65.0, 95.81),
    },
    "trace_1000": {
        "TapFinger": (4.66, 4.0, 7.0, 6.63),
        "Optimus": (5.39, 5.0, 8.0, 7.77),
        "Tiresias": (5.57, 5.0, 8.0, 8.34),
        "Random": (5.03, 4.0, 7.0, 7.62),
        "Min": (4.92, 4.0, 7.0, 7.50),
    },
    "trace_6_agent_2000": {
        "TapFinger": (4.73, 4.0, 7.0, 13.97),
        "Optimus": (5.28, 5.0, 8.0, 15.23),
        "Tiresias": (5.58, 5.0, 8.0, 16.89),
        "Random": (4.96, 4.0, 7.0, 14.32),
        "Min": (4.83, 4.0, 7.0, 14.12),
    },
    "SJF-test": {
        "TapFinger": (8.06, 3.5, 18.0, 16.07),
        "Optimus": (13.33, 11.0, 25.0, 27.19),
        "Tiresias": (35.79, 36.5, 60.9, 50.49),
        "Random": (52.97, 61.0, 88.0, 65.59),
        "Min": (12.60, 12.0, 23.9, 28.09),
    },
}

REDUCTION: dict[str, dict[str, tuple[float, float]]] = {
    "synthetic": {"Optimus": (0.251, 0.286), "Tiresias": (0.562, 0.667), "Random": (0.500, 0.500),
                  "Min": (0.497, 0.615)},
    "synthetic_6_agent": {"Optimus": (0.205, 0.143), "Tiresias": (0.514, 0.600), "Random": (0.477, 0.455),
                          "Min": (0.519, 0.600)},
    "multiple-gamma=1": {"Optimus": (0.445, 0.333), "Tiresias": (0.432, 0.429), "Random": (0.716, 0.636),
                         "Min": (0.851, 0.840)},
    "hetero_6_agent": {"Optimus": (0.401, 0.200), "Tiresias": (0.549, 0.429), "Random": (0.793, 0.724),
                       "Min": (0.854, 0.846)},
    "trace_1000": {"Optimus": (0.137, 0.200), "Tiresias": (0.164, 0.200), "Random": (0.075, 0.000),
                   "Min": (0.053, 0.000)},
    "trace_6_agent_2000": {"Optimus": (0.104, 0.200), "Tiresias": (0.151, 0.200), "Random": (0.047, 0.000),
                           "Min": (0.020, 0.000)},
    "SJF-test": {"Optimus": (0.396, 0.682), "Tiresias": (0.775, 0.904), "Random": (0.848, 0.943),
                 "Min": (0.361, 0.708)},
}

#: the paper's own claims next to the stored reductions
CLAIMS: dict[str, str] = {
    "synthetic": '"up to 28.6%" (synthetic)',
    "synthetic_6_agent": '"at least 20.5%"',
    "multiple-gamma=1": '"43.2% and 44.5%" (vs Tiresias / Optimus)',
    "hetero_6_agent": '"40.1% to 54.9%"',
    "trace_1000": '"13.7%" (3-agent test-bed, vs Optimus)',
    "trace_6_agent_2000": '"10.4%" (6-agent test-bed, vs Optimus)',
    "SJF-test": "",
}
