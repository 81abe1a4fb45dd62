// What the run page charts: the fixed charts in page order (a metric key belongs to the first chart that
// claims it; keys no chart claims, and that are not eval/…, are offered by the metric picker), the
// evaluation metrics shown first, and the Plotly options every chart of the page shares.
import { isDpo } from "./state.js";

export const CHARTS = [
  { id: "reward", title: "Reward (mean ± std)", keys: ["reward/mean"], band: "reward/std", always: !isDpo },
  { id: "accuracy", title: "Accuracy", keys: ["accuracy"] },
  { id: "criteria", title: "Rubric criteria", prefix: "criterion/" },
  { id: "kl", title: "KL to the reference", keys: ["kl"] },
  { id: "entropy", title: "Entropy", keys: ["entropy"] },
  { id: "clip", title: "Clip fraction", keys: ["clip_fraction"] },
  { id: "length", title: "Response length (tokens)", keys: ["response_length"] },
  { id: "turns", title: "Turns and tool calls", keys: ["turns", "tool_calls"] },
  { id: "zero", title: "Zero-variance group fraction", keys: ["zero_variance_fraction"] },
  { id: "step_time", title: "Step time by phase (s)", keys: ["step_time"], prefix: "time/", stack: true },
  { id: "throughput", title: "Tokens / s", keys: ["tokens_per_s"] },
  { id: "loss", title: "Loss", keys: ["loss"] },
  // DPO runs (trainers/recipes/dpo.py, TRL's names mapped in trainers/importers/trl.py).
  { id: "dpo_rewards", title: "DPO implicit reward: chosen vs rejected", keys: ["dpo/reward_chosen", "dpo/reward_rejected"], always: isDpo },
  { id: "dpo_margin", title: "DPO reward margin", keys: ["dpo/margin"], always: isDpo },
  { id: "dpo_accuracy", title: "DPO preference accuracy", keys: ["dpo/accuracy"], always: isDpo },
  { id: "staleness", title: "Staleness (policy versions behind)", keys: ["staleness/mean", "staleness/max"] },
  { id: "mismatch", title: "Log-prob mismatch (sampler vs learner)", prefix: "logprob_mismatch/" },
];

export const EVAL_PREFIX = "eval/";
export const EVAL_FIRST = ["eval/accuracy", "eval/dpo/accuracy", "eval/reward/mean"];
export const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
