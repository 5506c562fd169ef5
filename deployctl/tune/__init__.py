"""`deployctl tune` (issue 44): candidates from a spec and the hosts' cards, pruned by the spec's own rules, measured
one by one, ranked; everything here is pure (no I/O): the command in deployctl/commands/tune.py does the rest."""
