"""Upstream vLLM's P/D over a KV connector: a prefill (kv_producer) answers `do_remote_decode` with the
kv_transfer_params a decode needs; a decode (kv_consumer) serves only requests carrying a producer's params."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Callable, Dict, List, Optional, Tuple

from standin.app import App, log
from standin.ascend_config import SHM_NEEDED_BYTES, AscendConfig
from standin.config import hccn_conf_readable
from standin.generation import ApiError, GenRequest, full_body, tokens
from standin.httpio import Request, json_response
from standin.instance import InstanceEngine
from standin.trace import TraceRecord

BLOCK_SIZE = 128
KV_CHECK_TIMEOUT_S = 2.0


async def serve_kv_ports(config: AscendConfig, sockets: List[socket.socket]) -> List[asyncio.AbstractServer]:
    """Each bound kv port answers a connection with one JSON line saying whose port it is, then closes: what a
    decode checks a prefill's kv_transfer_params against (the real connector handshakes on these ports too)."""
    kv, tp = config.kv, config.args.server.tp
    owners = [(g, t) for g in config.args.ranks for t in range(tp)]
    servers = []
    for sock, (rank, tp_rank) in zip(sockets, owners):
        # hccn_conf: whether what this rank sends over HCCL is sound (a decode fed by a rank without its NIC
        # table generates wrong tokens, as a corrupt KV transfer does)
        ident = json.dumps({"engine_id": kv.engine_id, "kv_role": kv.role, "dp_rank": rank, "tp_rank": tp_rank,
                            "port": sock.getsockname()[1],
                            "hccn_conf": hccn_conf_readable(config.base.knobs)}).encode() + b"\n"

        async def answer(reader, writer, ident=ident):
            writer.write(ident)
            try:
                await writer.drain()
            except ConnectionError:
                pass
            writer.close()

        servers.append(await asyncio.start_server(answer, sock=sock))
    return servers


class AscendEngine(InstanceEngine):
    def __init__(self, config: AscendConfig) -> None:
        garbled = not hccn_conf_readable(config.base.knobs)  # every vllm-ascend server runs HCCL
        if garbled:
            log(f"{config.base.knobs.hccn_conf} is not a readable file: HCCL runs without its NIC table, "
                "answers are wrong")
        super().__init__(config.base.knobs, garbled, config.base.args.max_num_seqs,
                         engines=tuple(str(r) for r in config.fronted_ranks), max_model_len=config.base.max_model_len,
                         kv_role=config.kv.role if config.kv is not None else None)
        self.config = config
        self.nested_errors = config.version is not None
        self._next_rank = 0
        self._producers: Dict[Tuple[str, int], dict] = {}  # kv address checked -> what its port said
        self.on_engine_death: Optional[Callable[[], None]] = None  # ends the server (vllm_serve sets it)

    def _shm_too_small(self) -> bool:
        return self.config.shm_bytes is not None and self.config.shm_bytes < SHM_NEEDED_BYTES

    def _engine_core_dies(self) -> None:
        """What vLLM logs when an engine core process dies (its API server then shuts down): the 64 MB /dev/shm
        case of vllm-ascend #3513, made certain at the first generation request."""
        log(f"/dev/shm holds {self.config.shm_bytes} bytes (< {SHM_NEEDED_BYTES}: docker run needs --shm-size, "
            "vllm-ascend #3513, #3645)")
        print("ERROR [core_client.py] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
              flush=True)
        if self.on_engine_death is not None:
            self.on_engine_death()

    def _kv_params(self, gen: GenRequest) -> dict:
        kv, args = self.config.kv, self.config.args
        ranks = args.ranks
        rank = ranks[self._next_rank % len(ranks)]
        self._next_rank += 1
        blocks = max(1, -(-gen.prompt_tokens // BLOCK_SIZE))
        return {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": kv.engine_id,
                "remote_host": self.config.if_ip, "remote_port": kv.port + rank * args.server.tp,
                "remote_block_ids": list(range(blocks)), "remote_dp_rank": rank}

    async def _producer_at(self, host: str, port: int) -> dict:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), KV_CHECK_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            raise ApiError(400, f"kv_transfer_params: cannot reach the prefill's kv port {host}:{port}: "
                                f"{getattr(exc, 'strerror', None) or exc!r}", "BadRequestError") from None
        try:
            line = await asyncio.wait_for(reader.readline(), KV_CHECK_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            line = b""
        finally:
            writer.close()
        try:
            return json.loads(line)
        except ValueError:
            raise ApiError(400, f"kv_transfer_params: {host}:{port} is not a KV connector port",
                           "BadRequestError") from None

    async def _check_remote(self, params) -> dict:
        engine, host, port = params.get("remote_engine_id"), params.get("remote_host"), params.get("remote_port")
        if not isinstance(engine, str) or not isinstance(host, str) or not isinstance(port, int):
            raise ApiError(400, "kv_transfer_params needs remote_engine_id, remote_host and remote_port",
                           "BadRequestError")
        ident = self._producers.get((host, port))
        if ident is None or ident.get("engine_id") != engine:
            ident = await self._producer_at(host, port)
            if ident.get("kv_role") != "kv_producer" or ident.get("engine_id") != engine:
                raise ApiError(400, f"kv_transfer_params: remote_engine_id {engine!r} is not a kv_producer's: "
                                    f"{host}:{port} belongs to engine {ident.get('engine_id')!r} "
                                    f"({ident.get('kv_role')})", "BadRequestError")
            self._producers[(host, port)] = ident
        return ident

    async def generate(self, req: Request, body: dict, gen: GenRequest, rid: str, record: TraceRecord,
                       writer: asyncio.StreamWriter) -> None:
        if self._shm_too_small():
            self._engine_core_dies()
            error = ApiError(500, "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                             "InternalServerError")
            writer.write(json_response(500, error.body(nested=True), req.keep_alive, (("x-request-id", rid),)))
            await writer.drain()
            record.finish(500)
            return
        kv = self.config.kv
        params = body.get("kv_transfer_params")
        remote_garbled = False
        if kv is not None and kv.role == "kv_consumer" and not _remote_prefill(params):
            # A decode instance asked without a producer's params prefills the prompt itself and answers:
            # vllm-ascend's MooncakeConnectorScheduler.get_num_new_matched_tokens returns (0, False), "No remote
            # prefill for this request", unless kv_transfer_params.do_remote_prefill is set, and request_finished
            # returns (False, None) for params None (vllm-ascend main @182b75e
            # vllm_ascend/distributed/kv_transfer/kv_p2p/mooncake_connector.py:1843-1879, :1954-1955). It is no
            # error: `deployctl watch`'s one-token generate straight to a decode rank gets a 200.
            log(f"local prefill {rid}: no kv_transfer_params from a prefill instance")
        elif kv is not None and kv.role == "kv_consumer":
            try:
                remote_garbled = (await self._check_remote(params)).get("hccn_conf") is False
            except ApiError as exc:
                log(f"refused {rid}: {exc.message}")
                writer.write(json_response(exc.status, exc.body(nested=True), req.keep_alive,
                                           (("x-request-id", rid),)))
                await writer.drain()
                record.finish(exc.status)
                return
            log(f"remote prefill {rid}: engine_id={params['remote_engine_id']} "
                f"host={params['remote_host']} port={params['remote_port']} "
                f"blocks={len(params.get('remote_block_ids') or [])}")
        elif kv is not None and isinstance(params, dict) and params.get("do_remote_decode") and not gen.stream:
            await self.run(req, gen, self._prefill, rid, record, writer)  # the prefill holds a slot too
            return
        await super().generate(req, body, gen, rid, record, writer, garbled=remote_garbled)

    async def _prefill(self, first: float, cache, req: Request, gen: GenRequest, rid: str, record: TraceRecord,
                       writer) -> None:
        loop = asyncio.get_running_loop()
        words = tokens(gen.prompt, gen.completion_tokens, self.garbled)
        await self.whole_answer_due(loop, cache, first, len(words))
        doc = full_body(gen, rid, int(time.time()), "".join(words))
        doc["kv_transfer_params"] = self._kv_params(gen)
        writer.write(json_response(200, doc, req.keep_alive, (("x-request-id", rid),)))
        await writer.drain()
        record.chunk_written()
        record.finish(200)


class AscendApp(App):
    def __init__(self, config: AscendConfig, kv_ports: Tuple[int, ...]) -> None:
        super().__init__(config.base, AscendEngine(config))
        self.ascend = config
        self.kv_ports = kv_ports
        if config.version is not None:
            self.version = config.version.vllm
            self.nested_errors = True  # every vLLM it plays is >= 0.10.1 (vllm #22099)
            if config.version.vllm_tuple >= (0, 32):
                # vLLM 0.32's `vllm-VERSION-HASH8` (vllm/entrypoints/serve/utils/fingerprint.py); not hex here, so
                # tests/real_engine/test_engine.py still tells the real engine from this one
                self.fingerprint = f"vllm-{config.version.vllm}-standin"

    def info(self) -> dict:
        doc = super().info()
        doc.update(upstream_info(self.ascend, self.kv_ports))
        return doc


def upstream_info(c: AscendConfig, kv_ports: Tuple[int, ...]) -> dict:
    """What the proxy and the tests check a server against: role, group, ranks fronted, devices, network, kv."""
    a, kv = c.args, c.kv
    release = c.version.release if c.version else None
    unread = sorted(k for k in (a.additional_config or {}) if release and k in release.unread_additional_config)
    return {
        "launch": "external" if a.external else "internal", "headless": a.headless,
        "kv_role": kv.role if kv else None, "kv_connector": kv.connector if kv else None,
        "engine_id": kv.engine_id if kv else None, "dp": a.dp, "tp": a.server.tp, "dp_ranks": list(c.fronted_ranks),
        "local_dp_ranks": list(a.ranks), "expert_parallel": a.expert_parallel,
        "kv_port": kv.port if kv else None, "kv_ports": list(kv_ports),
        "kv_connector_extra_config": kv.extra if kv else None, "kv_transfer_config": kv.doc if kv else None,
        "devices": list(c.devices), "hccl_if_ip": c.if_ip, "ifname": c.ifname,
        "data_parallel_address": a.address, "data_parallel_rpc_port": a.rpc_port,
        "additional_config": a.additional_config, "compilation_config": a.compilation_config,
        # keys this release's ascend_config.py never reads (standin/versions.py): ignored as upstream ignores them
        "additional_config_unread": unread,
        "vllm_ascend_version": release.name if release else None, "vllm_version": c.version.vllm if c.version else None,
        "hybrid_lb": c.hybrid_lb, "shm_bytes": c.shm_bytes,
    }


def _remote_prefill(params) -> bool:
    """Whether a request to a decode instance carries a prefill's KV (`kv_transfer_params.do_remote_prefill`)."""
    return isinstance(params, dict) and bool(params.get("do_remote_prefill"))
