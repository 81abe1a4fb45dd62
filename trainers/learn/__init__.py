"""Learning: the trainer loop (`trainer`), the policy loss and log-probs (`losses`), advantages and
group statistics (`algorithms`), per-turn credit (`turn_credit`), Ray rollout workers (`distributed`)
and learner shards (`sharded`), checkpoints (`checkpoint`), DPO (`dpo`), reward-model training
(`reward_training`) and giving a finished run's memory back (`memory`).

Imported lazily by the web app (`algorithms` and `turn_credit` are pure Python and never pull torch).
"""
