"""One turn of an agent that may spend money, scripted (no model): engram decides what it may do.

Against the demo tenant (`./dev up` seeds `acme`: a $40k/month Meta cap, $34k already spent on Meta
in 2026-11), the user asks for $8,000 more on Meta for November. The agent

1. pre-loads its context (every important memory it may see, with statuses, and the live data);
2. writes what the user asked as a typed memory (a `MarketingMemory` of the user it acts for);
3. asks `check_plan` before spending, and is told the spend breaches the Meta cap (105%);
4. scales the spend down to what the cap leaves and checks again (100%: near the limit, no breach);
5. records the decision, citing the cap memory, its own new memory and the spend observation;
6. `justify`s the decision (who recorded it for whom, what it relied on, every event, its derived
   status with the rule behind it) and the cap it relied on (who set it, every event, its rule).

Run it against a running server with an agent's token:

    export ENGRAM_URL=http://127.0.0.1:8000
    export ENGRAM_TOKEN=$(.venv/bin/engram token acme --role agent --user assistant --on-behalf-of dana)
    python examples/agent_loop.py

It needs only the client (`pip install ./clients/python`). Each step prints one line.
"""

from __future__ import annotations

import sys

from engram_client import Engram, EngramError

REQUEST = "Put another $8,000 into Meta for November's holiday push."
PERIOD = "2026-11"


def spend(amount: float) -> dict[str, object]:
    return {"platform": "meta", "amount": amount, "currency": "USD", "period": PERIOD}


def turn(mem: Engram, user: str) -> None:
    # 1. What the agent must always know, whatever the request says.
    context = mem.context(REQUEST)
    cap = next(item for item in context.items if item.id == "meta-cap")
    budget = cap.statuses["budget"]
    print(f"1 context: {context.count} memories; {cap.label}: {budget['status']} at {budget['percent']}%")

    # 2. Remember the request, typed (an agent writes memories of the user it acts for).
    wish = mem.remember(
        "Holiday push",
        f"{user} wants $8,000 more on Meta prospecting for the {PERIOD} holiday push.",
        kind="objective",
        importance=4,
        memory_class="MarketingMemory",
        scope="user",
        user_id=user,
    )
    print(f"2 remembered: Holiday push as MarketingMemory at {wish.position}")

    # 3. Memory upstream of action: ask before spending.
    plan = mem.check_plan(spend=spend(8000))
    (finding,) = [f for f in plan.findings if f.memory_id == "meta-cap"]
    print(f"3 check_plan meta 8000: ok={plan.ok} {finding.status}: {finding.explanation}")

    # 4. A scripted policy: on a breach, spend only what the cap leaves.
    amount = 8000
    if finding.status == "breach":
        values = finding.values
        amount = values["cap"] - values["spent"]
        plan = mem.check_plan(spend=spend(amount))
        (finding,) = [f for f in plan.findings if f.memory_id == "meta-cap"]
        print(f"4 check_plan meta {amount}: ok={plan.ok} {finding.status}: {finding.explanation}")

    # 5. Record the decision, citing what it relied on: the cap, the request, the live spend.
    decided = mem.record_decision(
        f"Spend {amount:,} USD more on Meta in {PERIOD}, not 8,000: 8,000 would breach the Meta cap.",
        relied_on=["meta-cap", wish.memory_id],
        live_data=[f"spend:meta:USD:{PERIOD}"],
        spend=spend(amount),
        wait=True,
    )
    decision_id = decided.id
    print(f"5 decision recorded at {decided.position}")

    # 6. Why: the decision's provenance in one answer, each derived status with its rule ...
    why_decided = mem.justify_decision(decision_id)
    relied = " + ".join(sorted(f"{m.label or m.memory_id} ({m.how})" for m in why_decided.relied_on))
    (status,) = [d for d in why_decided.derived if d.predicate == "decisionStatus"]
    rule = status.derivations[0]
    print(
        f"6 justify decision: by {why_decided.actor.id} for {why_decided.acting_for}, relied on {relied} "
        f"and {', '.join(why_decided.live_data)}, {len(why_decided.events)} event(s); "
        f"decisionStatus {status.value} by {rule.rule}: {rule.explanation}"
    )
    # ... and the constraint it relied on: who set it, from which events, by which rule.
    why = mem.justify("meta-cap")
    (budget,) = [d for d in why.derived if d.predicate == "budgetStatus"]
    rule = budget.derivations[0]
    print(
        f"7 justify meta-cap: set by {why.actor.id} ({why.source}), {len(why.events)} event(s); "
        f"budgetStatus {budget.value} by {rule.rule}: {rule.explanation}"
    )


def main() -> int:
    mem = Engram.from_env()
    try:
        with mem:
            turn(mem, user=sys.argv[1] if len(sys.argv) > 1 else "dana")
    except EngramError as e:
        print(f"refused: {e.status} {e.reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
