"""`deployctl export`: the same spec as Kubernetes objects (plain core objects, LeaderWorkerSet, Kthena ModelServing).

Pure: a function of the spec and the derivations `up` uses (plan/containers.py, servers/vllm_ascend/upstream.py); only
commands/export.py reads or writes files."""
