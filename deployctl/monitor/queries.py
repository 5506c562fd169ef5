"""PromQL for one deployment (pure): every query the dashboard draws and the alerts test, from the flavour's metric
names and the target labels, so panels and rules cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass

from deployctl.monitor import npu_exporter
from deployctl.monitor.durations import PICKUP_MS, duration, millis
from deployctl.monitor.known_errors import METRIC as KNOWN_ERRORS, SCANNED
from deployctl.servers.metrics import ServerMetrics

SERVERS_JOB = "deployctl-servers"
FRONT_JOB = "deployctl-front"
NPU_JOB = "deployctl-npu-exporter"
NODE_JOB = "deployctl-node-exporter"
ROUTER_JOB = "deployctl-router"

RANK = "deployment, role, group, rank, host, instance"  # a server's identity in every per-rank query
SLO_WINDOW = "5m"  # the latency SLO looks at this much traffic, and must hold that long to fire
EXPECTED = "role_servers"  # each server target's label: how many API servers of its role the spec runs


@dataclass(frozen=True)
class Queries:
    deployment: str
    names: ServerMetrics
    scrape_ms: int

    @classmethod
    def of(cls, deployment: str, names: ServerMetrics, scrape_interval: str) -> "Queries":
        return cls(deployment, names, millis(scrape_interval))

    @property
    def sel(self) -> str:
        return f'deployment="{self.deployment}"'

    @property
    def rate_window(self) -> str:
        """For panels: four scrapes, at least a minute (rate() needs two samples, and a minute smooths)."""
        return duration(max(4 * self.scrape_ms, 60_000))

    @property
    def stall_window(self) -> str:
        """For the hang: two scrapes. increase() over it is 0 only when two samples in a row agree."""
        return duration(2 * self.scrape_ms)

    def quantile(self, histogram: str, q: float) -> str:
        return (f"histogram_quantile({q}, sum by (le, role) "
                f"(rate({histogram}_bucket{{{self.sel}}}[{self.rate_window}])))")

    def per_rank(self, metric: str) -> str:
        return f"sum by ({RANK}) ({metric}{{{self.sel}}})"

    def per_rank_rate(self, metric: str) -> str:
        return f"sum by ({RANK}) (rate({metric}{{{self.sel}}}[{self.rate_window}]))"

    def by_role_rate(self, metric: str, by: str = "role", role: str = "") -> str:
        """Per second over the rate window, summed by `by` (`role`: one role's series only)."""
        only = f',role="{role}"' if role else ""
        return f"sum by ({by}) (rate({metric}{{{self.sel}{only}}}[{self.rate_window}]))"

    def mean(self, histogram: str) -> str:
        """A histogram's mean per role over the rate window (no request in it: no value)."""
        return (f"sum by (role) (rate({histogram}_sum{{{self.sel}}}[{self.rate_window}])) / "
                f"sum by (role) (rate({histogram}_count{{{self.sel}}}[{self.rate_window}]))")

    def per_card(self, metric: str) -> str:
        return f'max by (deployment, host, id) ({metric}{{{self.sel},job="{NPU_JOB}"}})'

    # --- panels -------------------------------------------------------------------------------------------------
    def in_flight_by_role(self) -> str:
        """P:D balance: requests held per role (running + waiting), prefill against decode."""
        n = self.names
        return (f'sum by (role) ({n.running}{{{self.sel},role=~"prefill|decode"}}) + '
                f'sum by (role) ({n.waiting}{{{self.sel},role=~"prefill|decode"}})')

    def tokens_by_role(self) -> str:
        """P:D balance: prompt tokens/s into prefill and generated tokens/s out of decode."""
        n = self.names
        return (f'sum by (role) (rate({n.prompt_tokens}{{{self.sel},role="prefill"}}[{self.rate_window}])) or '
                f'sum by (role) (rate({n.generation_tokens}{{{self.sel},role="decode"}}[{self.rate_window}]))')

    def kv_fetching(self) -> str:
        return f'sum by (role, stage) ({self.names.kv_fetching}{{{self.sel},role="decode"}})'

    def router(self, metric: str, by: str = "") -> str:
        grouped = f"sum by ({by}) " if by else "sum "
        return f'{grouped}({metric}{{{self.sel},job="{ROUTER_JOB}"}})'

    def router_rate(self, metric: str, by: str) -> str:
        return f'sum by ({by}) (rate({metric}{{{self.sel},job="{ROUTER_JOB}"}}[{self.rate_window}]))'

    def router_quantile(self, q: float, histogram: str) -> str:
        return (f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket{{{self.sel},"
                f'job="{ROUTER_JOB}"}}[{self.rate_window}])))')

    def targets_up(self) -> str:
        return f"up{{{self.sel}}}"

    def front_up(self) -> str:
        return f'probe_success{{{self.sel},job="{FRONT_JOB}"}}'

    def hbm_used(self) -> str:
        return self.per_card(npu_exporter.HBM_USED)

    def hbm_total(self) -> str:
        return self.per_card(npu_exporter.HBM_TOTAL)

    # --- alerts -------------------------------------------------------------------------------------------------
    def hang(self) -> str:
        """Requests held (running or waiting) while the generated-token counter stood still over the last two
        scrapes: what an HCCL hang looks like (the engine's gauges freeze with its batch in them). vLLM's API
        server moves both only when an output of its engine core arrives (vllm/v1/engine/async_llm.py
        output_handler -> vllm/v1/metrics/loggers.py PrometheusStatLogger.record: the gauges from the batch's
        SchedulerStats, the counter from its IterationStats), so a core stuck mid-batch leaves them as that batch
        set them (seen on vLLM 0.32 with its core SIGSTOPped). A core stuck while idle shows nothing held, however
        many requests then queue in the API server (none of its metrics counts them): `deployctl watch` finds
        that one."""
        n = self.names
        held = f"sum by ({RANK}) ({n.running}{{{self.sel}}} + {n.waiting}{{{self.sel}}}) > 0"
        flat = f"sum by ({RANK}) (increase({n.generation_tokens}{{{self.sel}}}[{self.stall_window}])) == 0"
        return f"({held}) and ({flat})"

    def kv_full(self) -> str:
        """The KV cache full (99 % or more) while the engine preempts sequences."""
        n = self.names
        full = f"max by ({RANK}) ({n.kv_usage}{{{self.sel}}}) >= 0.99"
        preempting = f"sum by ({RANK}) (increase({n.preemptions}{{{self.sel}}}[{self.rate_window}])) > 0"
        return f"({full}) and ({preempting})"

    @property
    def first_scrape_ms(self) -> int:
        """The longest Prometheus takes to scrape a target that just appeared in a list (or at its start)."""
        return PICKUP_MS + self.scrape_ms

    def hold(self, ms: int) -> str:
        """An alert's `for:`: `ms`, never shorter than the first scrape of new targets (a just-started Prometheus,
        or one that just read a rewritten list, has not seen every series yet)."""
        return duration(max(ms, self.first_scrape_ms))

    @property
    def down_window(self) -> str:
        """Three scrapes, and longer than Prometheus takes to drop a target `down` removed from the lists before
        it stopped the server (so that one's failed scrapes never fill a window): one slow scrape is not a rank
        gone, nor a server stopped after its target was removed."""
        return duration(max(3 * self.scrape_ms, PICKUP_MS + 2 * self.scrape_ms))

    def rank_down(self) -> str:
        """No scrape of the API server succeeded over the down window, and it is still a target (a range keeps a
        removed target's last failed samples after Prometheus marked it stale: `down` removes, then stops)."""
        up = f'up{{{self.sel},job="{SERVERS_JOB}"}}'
        return self._zero_all_window(up)

    def ranks_missing(self) -> str:
        """Fewer API servers of a role answered (a scrape in the down window) than its targets' `role_servers`
        label says the spec runs: no count is written here, so `up`/`down` change it by rewriting the lists alone.
        The expected side needs the role's targets present now and one interval ago (all of a list's new targets
        have had their first scrape by then); answering ones must be present now (a removed target's last
        samples do not count)."""
        up = f'up{{{self.sel},job="{SERVERS_JOB}"}}'
        by = f"deployment, role, {EXPECTED}"
        interval = duration(self.scrape_ms)
        expected = (f'label_replace(group by ({by}) ({up} offset {interval}) and on ({by}) group by ({by}) ({up}), '
                    f'"answering", "$1", "{EXPECTED}", "(.*)")')
        # Only while the role's target count held over the whole down window: a rewritten list (`down`) is dropped
        # target by target, and one already gone read as a missing rank (seen: RanksMissing pending during `down`
        # with one of two decode targets dropped). One interval was not enough: Prometheus marks a removed target
        # stale at its own next scrape slot, an interval after the removal (scrape/scrape.go endOfRunStaleness),
        # so two targets of one list go stale up to two intervals apart (seen on the bed under load). A rank whose
        # target stays but fails its scrapes is not a change of the count: it still counts at once.
        steady = f"count by ({by}) ({up}) == on ({by}) count by ({by}) ({up} offset {self.down_window})"
        answering = (f'count_values by ({by}) ("answering", count by ({by}) '
                     f"((max_over_time({up}[{self.down_window}]) == 1) and {up}))")
        return (f'label_replace(({expected} and on ({by}) ({steady})) unless on ({by}, answering) '
                f'{answering}, "answering", "", "answering", ".*")')

    def front_down(self) -> str:
        """The prober reached the front and its health check failed for the whole down window."""
        probe = f'probe_success{{{self.sel},job="{FRONT_JOB}"}}'
        return self._zero_all_window(probe)

    def _zero_all_window(self, series: str) -> str:
        """`series` 0 at every sample of the down window, and still present now (a dropped target's last failed
        samples do not count)."""
        return f"(max_over_time({series}[{self.down_window}]) == 0) and {series}"

    def prober_down(self) -> str:
        """blackbox_exporter itself did not answer Prometheus (no probe ran: the front's health is unknown)."""
        up = f'up{{{self.sel},job="{FRONT_JOB}"}}'
        return self._zero_all_window(up)

    def ttft_above(self, bound_ms: int) -> str:
        """The p99 time to first token of a role, over the SLO window, above the bound (no request: no value)."""
        return (f"histogram_quantile(0.99, sum by (le, deployment, role) (rate({self.names.ttft}_bucket{{{self.sel}}}"
                f"[{SLO_WINDOW}]))) > {bound_ms / 1000:g}")

    def scan_stale(self, max_age_s: int) -> str:
        """deployctl's log scan has not run for `max_age_s` (its textfile's timestamp)."""
        return f"time() - max by (deployment) ({SCANNED}{{{self.sel}}}) > {max_age_s}"

    def known_errors(self, ids: tuple[str, ...]) -> str:
        """Lines of these known-error signatures in a container's log (deployctl's scan, monitor/known_errors.py)."""
        signatures = "|".join(ids)
        return (f"max by (deployment, host, container, signature) "
                f'({KNOWN_ERRORS}{{{self.sel},signature=~"{signatures}"}}) > 0')
