"""Locust user classes that send greedy, fixed-length completion requests with token accounting.

A user waits for the ladder's current stage (its process's `ProcessState.board`), sends its quota of
requests for it, reports that it is done, and waits for the next stage. Each request becomes
one `RequestRecord` (sent to the master to be written) and one Locust request event named after
the rung, with response_time = end-to-end ms and response_length = output tokens, so Locust's
own stats, CSVs and web UI carry tokens. Nothing else is fired: Locust's "Aggregated" row counts
real requests only (TTFT and TPOT are in the Tokens tab, `llmload.loadgen.webui.live_sweep`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import gevent
from locust import User, constant, task
from locust.exception import StopTest
from locust.runners import WorkerRunner

from llmload.analysis.identity.determinism import digest
from llmload.core.clock import wall
from llmload.core.config import SweepConfig
from llmload.core.files.records import RequestRecord, encode_json
from llmload.core.names import DETERMINISM_PHASE, MEASURE_PHASE, REQUEST_TYPE, WARMUP_PHASE
from llmload.core.workload.lengths import draw
from llmload.loadgen.options import api_key
from llmload.loadgen.request.client import RequestContext, send_request
from llmload.loadgen.request.reply_check import reply_checker
from llmload.loadgen.run.messages import MSG_RECORD, MSG_USER_DONE, MSG_USER_READY, Stage
from llmload.loadgen.run.stage_plan import stage_trace
from llmload.loadgen.run.worker_state import ProcessState, process_state
from llmload.loadgen.shutdown import cut_by_stop
from llmload.loadgen.transport.exchange import Transport
from llmload.loadgen.transport.preflight import auth_headers
from llmload.loadgen.transport.send_gate import send_gate
from llmload.loadgen.workload.arrivals import ArrivalQueue, arrival_count, arrival_offsets
from llmload.loadgen.workload.payload import build_payload, endpoint_path
from llmload.loadgen.workload.prompts import workload_for
from llmload.loadgen.workload.session_play import SessionPlayer
from llmload.loadgen.workload.sessions import Reply, Turn
from llmload.loadgen.workload.trace_play import TraceTurn, own_connection, play_conversation

STAGE_POLL_S = 1.0


def prompt_key(stage: Stage, config: SweepConfig) -> str:
    """The place a request's distinct prompt is drawn for (llmload.loadgen.workload.prompts): the
    greedy-determinism check's probes, and the warm-up that sends their prompts first, share one at
    every rung; every other stage has its own (its phase and rung)."""
    if stage.phase == DETERMINISM_PHASE or (stage.phase == WARMUP_PHASE and config.determinism):
        return DETERMINISM_PHASE
    return f"{stage.phase}{stage.rung}"


def arrival_queue(state: ProcessState, stage: Stage, config: SweepConfig, process: str) -> ArrivalQueue:
    """This process's share of a rate stage's schedule, shared by its users
    (llmload.loadgen.workload.arrivals)."""
    queue = state.arrivals.get(stage.seq)
    if queue is None:
        assert stage.rate is not None and stage.start_at is not None and stage.slots is not None
        if config.mode == "trace":  # the trace's own schedule (llmload.loadgen.workload.trace)
            offsets = stage_trace(stage, config).offsets
        else:
            count = arrival_count(stage.rate, config.requests_per_rung, config.duration)
            offsets = arrival_offsets(
                stage.rate, count, burstiness=config.burstiness, seed=config.seed, rung=stage.rung
            )
        lo, hi = stage.slots.get(process, (0, 0))
        state.arrivals.clear()
        queue = state.arrivals[stage.seq] = ArrivalQueue(stage.start_at, offsets, (lo, hi), stage.users)
    return queue


class RequestFailure(Exception):
    """What Locust's failures table shows: the failure kind only, so failures group by kind."""


class LLMUser(User):
    """Base class: sends the configured request at each stage of the ladder, on its own transport
    (`llmload.loadgen.transport.exchange.Transport`: one client, its connections)."""

    abstract = True
    wait_time = constant(0)
    endpoint: str | None = None  # subclasses may pin "completions", "chat" or "responses"

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        if self.host is None:  # as FastHttpUser did
            raise StopTest(
                "You must specify the base host. Either in the host attribute in the User class, "
                "or on the command line using the --host option."
            )
        self._process = process_state(environment)
        stage = self._process.board.stage
        config = stage.config if stage else SweepConfig()
        options = environment.parsed_options
        self._last_seq = -1
        self._ready_seq = -1
        self._first_send: float | None = None  # t_start of this user's first request of the stage
        self._uid = uuid.uuid4().hex
        runner = environment.runner
        self._remote = isinstance(runner, WorkerRunner)  # records go to a master process
        self._worker = runner.client_id if self._remote else "local"
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
            **auth_headers(api_key(options)),
        }
        self.transport = self._open_transport(config)
        self._base_path = urlsplit(str(self.host)).path.rstrip("/")

    def _open_transport(self, config: SweepConfig) -> Transport:
        """A transport of this user's to its host (its own, or a sub-agent's)."""
        options = self.environment.parsed_options
        return Transport.open(
            str(self.host),
            connect_s=config.timeouts.connect,
            read_s=config.timeouts.first_token,
            connection=config.connection,
            ca_bundle=getattr(options, "ca_bundle", ""),
            insecure=bool(getattr(options, "tls_insecure", False)),
        )

    def on_stop(self) -> None:
        """The user stops (Locust kills its greenlet): its connections close now, not when the
        garbage collector finds them."""
        self.transport.close()

    def _stage_config(self, stage: Stage) -> SweepConfig:
        """The stage's configuration (the process's one copy), with the endpoint this user class pins."""
        config = stage.config
        if self.endpoint and config.endpoint != self.endpoint:
            config = dataclasses.replace(config, endpoint=self.endpoint)  # a valid choice by definition
        return config

    @task
    def run_stage(self) -> None:
        stage = self._process.board.wait_after(self._last_seq, STAGE_POLL_S)
        if stage is None:
            return
        if stage.start_at is None:
            if self._ready_seq != stage.seq:
                config = self._stage_config(stage)
                workload_for(config, stage.prompt_words, stage.prompt_vocab)  # built before the go
                if config.mode == "trace":
                    stage_trace(stage, config).prepare()
                ready = {"seq": stage.seq, "user": self._uid, "worker": self._worker}
                self.environment.runner.send_message(MSG_USER_READY, ready)
                self._ready_seq = stage.seq
            stage = self._process.board.wait_go(stage.seq, STAGE_POLL_S)
            if stage is None or stage.start_at is None:
                return
        gevent.sleep(max(0.0, stage.start_at - wall()))  # the master's instant (llmload.core.clock)
        self._first_send = None
        sent = 0
        if stage.rate is not None:
            config = self._stage_config(stage)
            queue = arrival_queue(self._process, stage, config, self._worker)
            trace = (
                stage_trace(stage, config)
                if config.mode == "trace" and stage.phase == MEASURE_PHASE
                else None
            )
            while (arrival := queue.take()) is not None:
                index, due = arrival
                if trace is not None and trace.conversations:  # llmload.loadgen.workload.trace_play
                    send = functools.partial(self.send_one, stage)
                    opener = functools.partial(self._open_transport, config)
                    subagents = functools.partial(own_connection, opener, send)  # one request at a time each
                    sent += play_conversation(trace, trace.conversations[index], due, send, subagents)
                    continue
                if (delay := due - wall()) > 0:  # an arrival already due is sent without yielding
                    gevent.sleep(delay)
                sent += self.send_one(stage, index, t_scheduled=due)
        elif (sessions := self._stage_config(stage).sessions) is not None and stage.phase == MEASURE_PHASE:
            assert stage.prompt_vocab is not None  # session runs are calibrated (run_start.prepare_workload)
            config = self._stage_config(stage)
            send = functools.partial(self.send_one, stage)
            player = SessionPlayer(
                sessions,
                config.seed,
                stage.prompt_vocab,
                stage.deadline,
                config.endpoint == "responses",
                send=send,
                subagent_sender=functools.partial(
                    own_connection, functools.partial(self._open_transport, config), send
                ),
            )
            sent += player.play(stage.rung, self._process.next_user_slot(stage, self._worker))
        elif stage.deadline is None:
            for _ in range(stage.requests_per_user):
                sent += self.send_one(stage)
        else:
            while wall() < stage.deadline and not self._process.board.ended(stage.seq):
                sent += self.send_one(stage)
        self._last_seq = stage.seq
        done = {"seq": stage.seq, "requests": sent, "first_send": self._first_send}
        self.environment.runner.send_message(MSG_USER_DONE, done)

    def send_one(
        self,
        stage: Stage,
        index: int | None = None,
        t_scheduled: float | None = None,
        turn: Turn | None = None,
        on_reply: Callable[[Reply], None] | None = None,
        trace_turn: TraceTurn | None = None,
        transport: Transport | None = None,
    ) -> int:
        """Send one request (and its configured retries); returns the number of records.
        `index` picks the prompt (default: the process's next; trace mode: the trace line);
        `t_scheduled` is the rate-mode arrival; `turn` a session's messages, `trace_turn` a
        conversation trace's turn, whose reply goes to `on_reply` (either sent with its session id
        as `X-Session-Id`); `transport`: the user's own unless given (a sub-agent's)."""
        send_gate().wait_turn()  # reads before writes (llmload.loadgen.transport.send_gate)
        config = self._stage_config(stage)
        request_id = os.urandom(16).hex()  # 32 random hex digits, as uuid4().hex, without a UUID object
        trace_line = None
        asked_in: int | None = None
        if trace_turn is not None:  # a conversation trace's turn (llmload.loadgen.workload.trace_play)
            prompt, max_tokens, trace_line = trace_turn.prompt, trace_turn.max_tokens, trace_turn.line
            t_scheduled = trace_turn.t_scheduled
            if trace_turn.messages is not None:
                turn = Turn(trace_turn.session, trace_turn.number, trace_turn.messages)
        else:
            index = self._process.next_prompt_index(stage, self._worker) if index is None else index
            if config.mode == "trace" and stage.phase == MEASURE_PHASE:
                prompt, max_tokens, trace_line = stage_trace(stage, config).request(index)
            else:
                asked_in = (
                    None
                    if config.prompt_tokens is None
                    else draw(config.prompt_tokens, config.seed, "input", index)
                )
                workload = workload_for(config, stage.prompt_words, stage.prompt_vocab)
                prompt = workload.prompt(index, request_id, asked_in, prompt_key(stage, config))
                max_tokens = draw(config.max_tokens, config.seed, "output", index)
        payload = build_payload(config, stage.model, prompt, max_tokens)
        if turn is not None:  # the Responses API takes the history as its input (resent, not stored)
            payload["input" if config.endpoint == "responses" else "messages"] = turn.messages

        where = turn if trace_turn is None else trace_turn  # its session, turn, parent and wait
        session = None if where is None else where.session
        headers = self._headers if session is None else {**self._headers, "X-Session-Id": session}
        ctx = RequestContext(
            request_id,
            stage.rung,
            stage.users,
            stage.phase,
            config.endpoint,
            config.stream,
            max_tokens,
            self._worker,
            asked_in,
            sent_digest(prompt, turn) if config.hash_texts else None,
            config.record_text,
            t_scheduled=t_scheduled,
            rate=stage.rate,
            trace_line=trace_line,
            session=session,
            turn=None if where is None else where.number,
            parent_session=None if where is None else where.parent,
            tool_wait_s=None if where is None else where.wait_s,
            run_id=stage.run_id,
            structured=config.structured,
            reply_check=reply_checker(config),
        )
        transport = transport or self.transport
        transport.set_mode(config.connection)
        return send_request(
            transport,
            self._base_path + endpoint_path(config.endpoint),
            payload,
            headers,
            ctx,
            total_timeout=config.timeouts.total,
            retries=config.retries,
            report=lambda rec: self._report(rec, stage.name),
            on_reply=on_reply,
        )

    def _report(self, rec: RequestRecord, name: str) -> None:
        if not rec.ok and cut_by_stop():  # the generator's own stop, not the server (loadgen.shutdown)
            return
        if self._first_send is None:
            self._first_send = rec.t_start  # the rung-start promise (llmload.loadgen.run.stage_protocol)

        def fire(request_type: str, ms: float, length: int = 0, exception: Exception | None = None) -> None:
            self.environment.events.request.fire(
                request_type=request_type,
                name=name,
                response_time=ms,
                response_length=length,
                exception=exception,
                context={},
                response=None,
                url=None,
                start_time=rec.t_start,
            )

        fire(
            REQUEST_TYPE,
            rec.e2e_s * 1000.0,
            rec.output_tokens,
            None if rec.ok else RequestFailure(rec.outcome),
        )
        # a worker sends the record's dict (msgpack) to the master; the local process hands the
        # record itself to its own master side: Locust's local runner calls the listener directly
        self.environment.runner.send_message(MSG_RECORD, rec.to_dict() if self._remote else rec)


def sent_digest(prompt: str, turn: Turn | None) -> str:
    """The greedy-determinism check's `prompt_hash`: of what the request sends, the prompt, or a
    session turn's messages (its own history, not the workload's prompt)."""
    return digest(prompt if turn is None else encode_json(turn.messages).decode())


class CompletionsUser(LLMUser):
    """POST /v1/completions (or the endpoint the ladder file names)."""


class ChatUser(LLMUser):
    """POST /v1/chat/completions."""

    endpoint = "chat"


class ResponsesUser(LLMUser):
    """POST /v1/responses (streamed: llmload.loadgen.stream.responses)."""

    endpoint = "responses"
