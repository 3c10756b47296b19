"""Each figure of a run against its target: `TARGETS` per device type, one `Verdict` per figure measured."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

TARGETS = {
    "cpu": {
        "throughput_ratio": 3.0,
        "limit_share": 0.95,
        "time_ratio": 1 / 3,
        "tuned_time_ratio": 1 / 4,
        "same_step_ppl_ratio": 1.0,
        "bf16_ppl_drift": 0.02,
    },
    "cuda": {
        "throughput_ratio": 3.0,
        "limit_share": 0.95,
        "time_ratio": 1 / 3,
        "tuned_time_ratio": 1 / 4,
        "same_step_ppl_ratio": 1.0,
        "bf16_ppl_drift": 0.02,
        "mfu": 0.45,
    },
}


@dataclass
class Verdict:
    figure: str
    value: Optional[float]
    comparison: str  # ">=", "<=" or ">"
    target: float

    @property
    def passed(self) -> bool:
        if self.value is None or math.isnan(self.value):
            return False
        compare = {">=": float.__ge__, "<=": float.__le__, ">": float.__gt__}[self.comparison]
        return compare(float(self.value), float(self.target))

    def row(self) -> list[str]:
        value = "not reached" if self.value is None else f"{self.value:.3f}"
        return [self.figure, value, f"{self.comparison} {self.target:.3g}", "PASS" if self.passed else "FAIL"]


def verdicts(results: dict[str, Any], device_type: str) -> list[Verdict]:
    targets = TARGETS[device_type]
    out = []
    rounds = results.get("rounds", {})
    if "ratio" in rounds:
        # judged on the same objective: ours at the HF recipe's masking rate (the rate as ours trains is a recipe
        # choice, which the quality and tuned sections judge at equal time)
        figure = "throughput at the HF recipe's masking rate: ours / HF recipe"
        out.append(Verdict(figure, rounds["equal_ratio"], ">=", targets["throughput_ratio"]))
        if "mfu" in targets:
            out.append(Verdict("MFU of ours", rounds["mfu"]["ours"], ">=", targets["mfu"]))
    if "ours_over_limit" in rounds:
        out.append(Verdict("ours / bare-step limit", rounds["ours_over_limit"], ">=", targets["limit_share"]))
    quality = results.get("quality")
    if quality:
        out.append(Verdict("time to target ppl: ours / HF", quality["time_ratio"], "<=", targets["time_ratio"]))
        same = quality["same_step"]
        ratio = same["ours_ppl"] / same["hf_ppl"] if same else None
        out.append(Verdict("ppl at the same step: ours / HF", ratio, "<=", targets["same_step_ppl_ratio"]))
    electra = results.get("electra")
    if electra:
        out.append(Verdict("electra - mlm test accuracy, equal time", electra["electra_minus_mlm"], ">=", 0.0))
    objectives = results.get("objectives")
    if objectives:  # a pair objective helps the pair task when its paired difference from MLM clears its interval
        for name, label in (("nsp", "NSP"), ("sop", "SOP")):
            diff = objectives["pair"]["rows"][name]["minus_mlm"]
            figure = f"objectives: MLM+{label} - MLM on the pair task, beyond its interval"
            out.append(Verdict(figure, diff["mean"] - diff["half_width"], ">", 0.0))
    adapt = results.get("adapt")
    if adapt:  # the three targets: adaptation pays in the domain, ours >= the HF recipe, ours >= 2x tokens/s
        rows = adapt["rows"]
        if "domain" in adapt["tasks"]:  # fine-tuned on the domain task
            gain = rows["ours"]["domain"]["minus_base"]
            out.append(
                Verdict(
                    "adapt: ours - base on the domain task, beyond its interval",
                    gain["mean"] - gain["half_width"],
                    ">",
                    0.0,
                )
            )
            out.append(
                Verdict(
                    "adapt: ours / HF recipe, domain task accuracy",
                    rows["ours"]["domain"]["mean"] / rows["hf"]["domain"]["mean"],
                    ">=",
                    1.0,
                )
            )
        out.append(
            Verdict(
                "adapt: ours / HF recipe, domain ppl", rows["ours"]["domain_ppl"] / rows["hf"]["domain_ppl"], "<=", 1.0
            )
        )
        out.append(Verdict("adapt: tokens/s ours / HF recipe", adapt["tokens_per_s_ratio"], ">=", 2.0))
    downstream = results.get("downstream")
    if downstream:
        ours, hf, untrained = (downstream[name]["score"] for name in ("ours", "hf", "untrained"))
        margin = ours["mean"] - untrained["mean"] - (ours["half_width"] + untrained["half_width"])
        out.append(Verdict("downstream: ours - untrained, beyond both intervals", margin, ">", 0.0))
        out.append(Verdict("downstream: ours / HF recipe at equal time", ours["mean"] / hf["mean"], ">=", 1.0))
    recipe = results.get("recipe")
    if recipe and recipe["same_step"]:
        same = recipe["same_step"]
        out.append(
            Verdict(
                "same recipe, ppl at the last step: ours / HF",
                same["ours_ppl"] / same["hf_ppl"],
                "<=",
                targets["same_step_ppl_ratio"],
            )
        )
    tuned = results.get("tuned")
    if tuned:
        figure = "time to the tuned HF recipe's ppl: ours / HF"
        out.append(Verdict(figure, tuned["time_ratio"], "<=", targets["tuned_time_ratio"]))
    precision = results.get("precision")
    if precision:
        same = precision["same_step"]
        drift = abs(same["bf16_ppl"] / same["fp32_ppl"] - 1) if same else None
        out.append(Verdict("bf16 vs fp32 ppl at the same step: |ratio - 1|", drift, "<=", targets["bf16_ppl_drift"]))
        # auto's choice is right when the precision it picked is the faster one
        other, auto = precision["other"], precision["auto"]
        figure = f"{other} / fp32 tokens/s (auto picks {auto})"
        out.append(Verdict(figure, precision["speedup"], "<=" if auto == "fp32" else ">=", 1.0))
    return out
