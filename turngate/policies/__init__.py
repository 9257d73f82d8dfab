"""turngate policies: rollout modes, trust rules, context admission, config. Pure."""
