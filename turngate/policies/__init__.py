"""turngate policies: rollout modes, trust rules, context admission, config. Pure.

config.py     the policy file's pydantic models, route and model-table lookup, JSON Schema
loading.py    YAML + environment overrides -> PolicyFile, with precise error locations
models.py     the built-in model table (context windows, counting method)
modes.py      shadow / enforce-no-tools / enforce as a decision table
trust.py      trust labels from the route policy; the role-forgery action
tokens.py     token counts of a final rendered request body
admission.py  context admission and each API's context-length error form
pins.py       adapter version registry and the conversation pause
diff.py       byte and semantic shadow diffs, one ShadowRecord per shadowed request
report.py     shadow records aggregated by rule and by diff path
"""
