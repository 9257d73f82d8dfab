"""The shadow report: the shadow records kept in the store, aggregated (policies/report.py).

GET /turngate/v1/shadow?limit=N&examples=K   report_json, newest N records (default: all
                                             kept), K examples per rule and per path
turngate shadow report [--state URL] [--json]   the same, from the store, for a terminal
"""

from __future__ import annotations

import logging

from turngate.policies.diff import ShadowRecord
from turngate.policies.report import ShadowReport, aggregate
from turngate.proxy.policy import SHADOW_LOG
from turngate.state.store import StateStore

log = logging.getLogger("turngate.proxy")


async def read_report(store: StateStore, *, limit: int, examples: int = 3) -> ShadowReport:
    records = []
    for entry in await store.read_log(SHADOW_LOG, limit=limit):
        try:
            records.append(ShadowRecord.from_json(entry))
        except (KeyError, TypeError, ValueError) as exc:
            # Written by another turngate version: left out of the report, not fatal to it.
            log.warning("a shadow record cannot be read: %s: %s", type(exc).__name__, exc)
    return aggregate(records, examples=examples)
