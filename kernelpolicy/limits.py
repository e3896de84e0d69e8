"""Every size and depth limit on input that crosses a boundary, as named constants.

Each limit is checked before third-party code (tomllib, json, CEL, protobuf, grpc) sees the input,
and exceeding one raises the surface's own :class:`~kernelpolicy.errors.KernelPolicyError`
subclass (or a gRPC INVALID_ARGUMENT / RESOURCE_EXHAUSTED) whose message names the constant.
Tests check every limit at the limit and one past it.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB

# Files.
MAX_POLICY_FILE_BYTES = 16 * MIB
"""One policy file (a 10,000-feature file is about 2.5 MiB)."""
MAX_POLICY_FILES = 1000
"""Policy files in one set (all paths and directories together)."""
MAX_PLATFORM_FILE_BYTES = 4 * MIB
"""One platform snapshot (``kernelpolicy probe --json`` of a 16-GPU node is about 10 KiB)."""
MAX_EVIDENCE_FILE_BYTES = 16 * MIB
"""One evidence file written by ``kernelpolicy verify``."""
MAX_PACK_CACHE_BYTES = 64 * MIB
"""One compiled-pack cache entry; a larger pack is not cached (a 10,000-feature pack's entry
is about 25 MiB)."""
MAX_SETTINGS_MEMO_BYTES = 1 * MIB
"""One entry of validated settings (``kernelpolicy.settings.memo``; each value is bounded by
``MAX_SETTING_CHARS``)."""
MAX_CODE_CACHE_BYTES = 8 * MIB
"""The file of compiled start-up code (``kernelpolicy.code_cache``: the dataclass methods and
the generated select/gate of the package and its bundled pack make about 250 KiB)."""
MAX_CODE_CACHE_ENTRIES = 1024
"""Code objects kept in that file (the package and its bundled pack make about 220; past it, a
write keeps what its process used): every process reads the whole file, about 1 MiB here."""
MAX_KERNEL_INDEX_BYTES = 1 * MIB
"""One variant's index in the kernel cache (``BuiltRecord.read_index``: the compiled kernels its
build added, a few hundred bytes each)."""
MAX_TLS_FILE_BYTES = 1 * MIB
"""One PEM file (certificate, key or CA bundle)."""
MAX_HARDWARE_CACHE_BYTES = 256 * KIB
"""The node's hardware cache (``<cache dir>/node/hardware.json``; a 16-GPU node's is a few KiB)."""
MAX_MACHINE_ID_FILE_BYTES = 128
"""A machine-id file: 32 hex characters and a newline; a longer file is not a machine ID."""
MAX_KERNEL_CACHE_ENTRIES = 100_000
"""Entries checked in the kernel cache: more than any real one holds; past it, it is not trusted."""

# Structure.
MAX_NESTING_DEPTH = 32
"""Arrays, tables and objects nested in any TOML or JSON document kernelpolicy reads."""

# CEL expressions in policies.
MAX_CEL_SOURCE_CHARS = 4096
"""One CEL expression's source text."""
MAX_CEL_DEPTH = 32
"""Parentheses, unary operators and nested calls in one CEL expression."""
MAX_CEL_NODES = 512
"""Operands and operators in one CEL expression."""

# Settings and environment.
MAX_SETTING_CHARS = 64 * KIB
"""One ``KERNELPOLICY_*`` value."""
MAX_ENV_VALUE_CHARS = 4 * KIB
"""One environment value a policy reads (longer values are an error for that switch)."""
MAX_UNKNOWN_VARIABLES_SAID = 16
"""Unknown ``KERNELPOLICY_*`` variables said per process, at most (each once; a process that is
handed environments, ``resolve(env=...)`` in a loop, cannot make it say more)."""
MAX_PORT_CHARS = 32
"""Digits read as a port in an address given (leading zeros allowed; the range decides): more
than ``int()`` reads is no port."""
SHOWN_ENV_VALUE_CHARS = 64
"""How much of an environment value logs, errors and API answers show (the rest is cut)."""
MAX_ENGINE_RULE_WORDS = 64
"""Variables, and command-line words, in one engine rule of a policy."""
MAX_VERSION_CHARS = 256
"""One version string (a driver, torch or library version)."""
MAX_INPUTS_BYTES = 256 * KIB
"""``KERNELPOLICY_VLLM_PLUGIN_INPUTS``, the inputs ``kernelpolicy exec`` hands the vLLM plugin."""
MAX_BATCH_ROUTES = 64
"""``by_batch`` rows of one feature (the bundled sampler has two)."""
MAX_BATCH_BOUND = 2**31 - 1
"""The largest ``min``/``max`` of a ``by_batch`` row: the rows of a tensor fit in int32."""

# The probe (what a driver, a library or a sysfs tree reports is input too).
MAX_PROBED_DEVICES = 256
"""Devices NVML may report, and KFD topology nodes read (8 MI300X in CPX mode are 64)."""
MAX_SYSFS_FILE_BYTES = 64 * KIB
"""One sysfs, procfs or ROCm version file the probe reads (a KFD properties file is ~1.5 KiB)."""
MAX_DEVICE_ID_CHARS = 128
"""One GPU UUID in a node's identity without a machine ID (longer ones are left out)."""
SHOWN_PROBE_ERROR_CHARS = 200
"""How much of one failed read's error (what NVML, amdsmi, a sysfs file or a library raised)
its ``probe_errors`` entry keeps: one readable line (the rest is cut)."""

# Requests to the daemon.
MAX_REQUEST_BYTES = 1 * MIB
"""One gRPC request message on the unix socket (over TCP: ``MAX_TCP_REQUEST_BYTES``)."""
MAX_REQUEST_FEATURES = 256
"""Distinct feature names in one request (duplicates are dropped first)."""
MAX_CONTEXT_ENTRIES = 64
"""Entries in one request's evaluation context (flagd/OFREP ``context``)."""
MAX_CONTEXT_DEPTH = 8
"""Nesting of one request's evaluation context."""
MAX_REQUEST_ENV_ENTRIES = 1024
"""Variables in one request's hypothetical environment (``env``)."""
SHOWN_ERROR_CHARS = 512
"""How much of an error message the daemon sends back or logs for one rejected request."""
MAX_PEER_KEY_CHARS = 100
"""The longest key a client's peer string of an unknown form gets (``server.peers``): one per
string, still bounded."""
MAX_ANSWER_CACHE_ENTRIES = 1024
"""Cached serialised answers per policy revision (least recently used are dropped)."""
MAX_ANSWER_CACHE_BYTES = 16 * MIB
"""Bytes of cached serialised answers per policy revision."""
MAX_CALL_CACHE_ENTRIES = 8192
"""Distinct call contexts the cache of one feature's ``select`` (or of one gate) keeps per
resolution; the next one starts it over. The daemon's clients choose the contexts."""
MAX_STRING_MEMO_ENTRIES = 64
"""Strings one compiled test of a string variable remembers its answer for
(``engine.string_memos``); a caller's further strings are answered without being kept."""


def shown(value: str, limit: int = SHOWN_ENV_VALUE_CHARS) -> str:
    """``value`` cut to ``limit`` characters, marked when cut: safe to log, raise or send.

    Idempotent: a value already cut to ``limit`` (with its mark) is returned as it is, so that
    showing a carried value again never cuts the mark itself.
    """
    if len(value) <= limit or _is_cut(value, limit):
        return value
    return f"{value[:limit]}...(cut, {len(value)} chars)"


def _is_cut(value: str, limit: int) -> bool:
    tail = value[limit:]
    return (
        tail.startswith("...(cut, ")
        and tail.endswith(" chars)")
        and tail[len("...(cut, ") : -len(" chars)")].isdigit()
    )


# The HTTP listener (OFREP, /metrics, health).
MAX_HTTP_BODY_BYTES = 64 * KIB
"""One HTTP request body (an OFREP evaluation context is a few hundred bytes)."""
MAX_HTTP_HEADER_BYTES = 8 * KIB
"""An HTTP request's target (path and query), and each of its header values."""
MAX_HTTP_HEADERS = 64
"""Header lines in one HTTP request."""
MAX_FLAG_KEY_CHARS = 256
"""One OFREP flag key (a feature or gate name)."""
MAX_HTTP_CONNECTIONS = 512
"""Open HTTP connections in all, and never more than ``HTTP_DESCRIPTOR_SHARE`` of the
process's descriptor limit (``RLIMIT_NOFILE``): the rest stays for the unix socket, gRPC and
files. A connection past the cap takes the place of the oldest one of the peer holding most."""
MAX_HTTP_CONNECTIONS_PER_PEER = 32
"""Open HTTP connections from one peer (``server.peers``: all of loopback one peer, IPv6 by its
/64); the peer's next one replaces its oldest."""
HTTP_DESCRIPTOR_SHARE = 0.5
"""The part of the descriptor limit the HTTP listener may hold (with 1,024 files: 512)."""
MAX_HTTP_HEADER_SECONDS = 10.0
"""From accepting a connection (TLS handshake included) to the end of its first request's
headers; past it the connection is closed."""
MAX_HTTP_BODY_SECONDS = 10.0
"""From the end of a request's headers to the end of its body: 408 past it. A request still
running after twice this long is cut."""
MAX_HTTP_IDLE_SECONDS = 30.0
"""A kept-alive connection between the end of one answer and the end of the next request's
headers."""
MAX_GRPC_CONNECTIONS = 256
"""Open gRPC connections on one listener (the TCP port, the unix socket: each its own), and
never more than ``GRPC_DESCRIPTOR_SHARE`` of the descriptor limit: idle connections held by one
local user on the TCP port cannot take the descriptors the workers' unix socket needs."""
GRPC_DESCRIPTOR_SHARE = 0.2
"""The part of the descriptor limit one gRPC listener may hold (with 1,024 files: 204)."""
MAX_GRPC_CONNECTIONS_PER_PEER = 32
"""Open gRPC connections on the TCP listeners from one peer (``server.peers``: all of loopback
one peer). The daemon accepts TCP itself and relays each connection to its gRPC server; past
this, a peer's new connection replaces that peer's least recently active one (and past
``MAX_GRPC_CONNECTIONS``, the heaviest peer's), so no one peer holds every connection slot."""
MAX_RELAY_SCAN_ENTRIES = 10_000
"""Entries of the temp directory the gRPC relay looks at, at start, for the private directories
of this user's daemons that died (``server.grpc_relay``): a crowded /tmp costs a bounded scan."""
GRPC_RELAY_DESCRIPTORS = 3
"""Descriptors one relayed TCP connection costs the daemon (the client's, the relay's end of
the private unix socket, the gRPC server's end): the TCP listener's share of the descriptor
limit is counted in these."""
MAX_GRPC_STREAMS_PER_CONNECTION = 100
"""Concurrent requests and streams on one gRPC connection (HTTP/2 SETTINGS, the figure RFC 9113
recommends as the least); a client's next stream waits for one to end. Above
``MAX_WATCH_STREAMS_PER_PEER``, so a peer's stream past that cap is refused, not held."""
MAX_GRPC_IDLE_SECONDS = 120.0
"""A gRPC connection with no request or stream open is closed after this long (clients connect
again when they next ask)."""
MAX_GRPC_HANDSHAKE_SECONDS = 10.0
"""From accepting a gRPC connection to the end of its HTTP/2 (and TLS) handshake."""
MAX_HYPOTHETICAL_RESOLVES = 2
"""Hypothetical answers (a request's own platform_json or env) worked out at once, each in a
thread beside the event loop, so that the node's own answers (cached) keep flowing."""
MAX_HYPOTHETICAL_WAITING = 32
"""Hypothetical requests waiting for one of those; RESOURCE_EXHAUSTED past it."""
MAX_WATCH_STREAMS = 256
"""Open server streams (Watch, flagd EventStream) from TCP peers in all (about 54 KiB each);
RESOURCE_EXHAUSTED past it. Clients on the unix socket have their own share (below), so no TCP
client can take theirs."""
MAX_WATCH_STREAMS_PER_PEER = 32
"""Open server streams from one peer (``server.peers``: all of loopback one peer, IPv6 by its
/64); all unix-socket clients count as one peer."""
MAX_GRPC_TCP_CALLS = MAX_WATCH_STREAMS + 64
"""gRPC calls in flight on the TCP listeners in all: their server streams and 64 more.
RESOURCE_EXHAUSTED past it, before the request is read, so that requests being received hold at
most this many times ``MAX_TCP_REQUEST_BYTES`` (80 MiB); the unix socket has a server of its own
and is never refused for what TCP clients hold."""
MAX_GRPC_CALLS_PER_PEER = MAX_WATCH_STREAMS_PER_PEER + 32
"""gRPC calls in flight on the TCP listeners from one peer (``server.peers``: all of loopback one
peer; its streams and 32 more): RESOURCE_EXHAUSTED past it, before the request is read, so that
no one peer holds all of ``MAX_GRPC_TCP_CALLS`` (five peers are needed to fill them)."""
MAX_GRPC_UNREAD_BYTES = 8 * KIB
"""What a gRPC client may send on a call before the daemon asks for its request (HTTP/2 stream
window, never grown by BDP probing): all that a call refused at once makes the daemon buffer.
A request the daemon reads gets a window of its whole announced size."""
MAX_GRPC_REQUEST_SECONDS = 10.0
"""From the start of a gRPC call on a TCP listener (its headers are in) to the end of its
request message (a request stream's first): past it the call is ended DEADLINE_EXCEEDED naming
this limit, and its place under ``MAX_GRPC_CALLS_PER_PEER`` and ``MAX_GRPC_TCP_CALLS`` is
freed. As ``MAX_HTTP_BODY_SECONDS`` for HTTP; a server stream, once its request is in, runs on."""
MAX_TCP_REQUEST_BYTES = 256 * KIB
"""One gRPC request message over TCP (``MAX_REQUEST_BYTES`` on the unix socket): a hypothetical
request's platform_json is about 3 KiB, a whole environment rarely 100 KiB."""
LOG_LINES_PER_MINUTE = 10
"""Lines per minute of one repeated event a client can cause (hang-ups, rejected requests,
connections replaced); the others are counted and the count logged with the next line."""

# Node labels.
MAX_FEATURE_FILE_BYTES = 64 * KIB
"""One Node Feature Discovery feature file: nfd-worker ignores bigger ones."""

# Fleet inventories (kernelpolicy diff).
DAEMON_TIMEOUT_SECONDS = 5.0
"""``kernelpolicy diff --daemons``: seconds each daemon has to connect, and again to answer."""
MAX_INVENTORY_NODES = 100_000
"""Nodes in one inventory: snapshots in a directory, or Node objects in ``kubectl get nodes``."""
MAX_INVENTORY_FILE_BYTES = 512 * MIB
"""One ``kubectl get nodes -o json`` file (10,000 labelled GPU nodes are about 100 MiB)."""
MAX_ROLLOUT_STEPS = 16
"""Percent steps ``kernelpolicy diff --steps`` counts for each staged rollout."""
MAX_DAEMON_DECISIONS = 10_000
"""Decisions ``kernelpolicy diff --daemons`` reads from one daemon's answer (a policy set of
10,000 features, the largest the limits above are sized for): a daemon that answers more is
counted as not answering, with this named, and none of its decisions is kept or compared. Each
name in an answer is cut to ``SHOWN_DAEMON_NAME_CHARS`` and escaped before it is compared or
printed."""
SHOWN_DAEMON_NAME_CHARS = 200
"""How much of a feature, implementation or error code a daemon names ``diff --daemons`` keeps
and shows in a line (the rest is cut)."""
SHOWN_DAEMON_ERROR_CHARS = 400
"""How much of a daemon's last reload error (a policy error lists every issue) ``diff
--daemons`` shows in a line."""
SHOWN_DAEMON_HALT_KEY_CHARS = 300
"""How much of a daemon's halt key (``feature/impl``: names of its policy set, bounded there)
``diff --daemons`` keeps."""
SHOWN_DAEMON_HALT_REASON_CHARS = 400
"""How much of a daemon's halt reason (a worker's failure message included) ``diff --daemons``
keeps."""
SHOWN_STATUS_CHARS = 1024
"""How much of one string a daemon sent (an error, a path, a halt reason) ``kernelpolicy
status``'s text report shows."""

# Run-time reports from workers to their node's daemon (issue 29, the halt loop).
REPORT_QUEUE_EVENTS = 1024
"""Events a worker keeps for its daemon: past it (the daemon away or slow) new events are
dropped and counted (``Reporter.dropped``), so a worker never grows nor waits on a report."""
REPORT_BATCH_EVENTS = 256
"""Events in one report line; the daemon refuses a line with more."""
MAX_REPORT_LINE_BYTES = 64 * KIB
"""One line of the report socket (a batch of events, or a clear-halt request)."""
MAX_REPORT_DETAIL_CHARS = 300
"""The detail of one event (a run-time failure's message); longer ones are refused."""
SHOWN_HALT_DETAIL_CHARS = 200
"""How much of a worker's last failure message (an event's detail) the daemon keeps in a halt's
reason (the rest is cut): the reason is sent to clients and written to the halts file."""
SHOWN_FALLBACK_REASON_CHARS = 300
"""How much of why an implementation stops serving (its error at load or at call: whatever the
kernel, its library or the call's arguments put in it) a run-time fallback keeps in
``runtime_fallbacks``, the decision's reasons and warnings, the log and the report to the node's
daemon (the rest is cut)."""
MAX_REPORT_COUNT = 1_000_000_000
"""The count one event may carry (guard trips since the worker's last report)."""
MAX_REPORT_CONNECTIONS = 256
"""Open connections to the report socket (one per worker process); the next one replaces the
oldest, so a flood only displaces itself."""
MAX_HALT_THRESHOLD = 1_000_000
"""The largest ``halt_on`` threshold a policy may set."""
MAX_HALTS_FILE_BYTES = 256 * KIB
"""The node's halts file (``x.halts.json`` beside the daemon's socket) a worker reads: a halt per
candidate with ``halt_on``, each a reason of a few hundred characters."""
MAX_HALT_REASON_CHARS = 2 * MAX_REPORT_DETAIL_CHARS
"""One halt's reason read from the halts file (the rule's words and a worker's detail); a file
with a longer one is not read."""

# Kernel variants built in the background (kernels/builds.py).
MAX_BUILD_SECONDS = 900.0
"""How long one kernel variant may build in the background: past it, the next call of that
variant finds it failed ("did not build within ...") and its calls go to the fallback for the
process, as a failed build's do (a hung JIT, a file lock another process never lets go). A cold
Triton sampler variant took about 45 s on an H100; a build that ends later is not used."""
MAX_RUNNING_BUILDS = 2
"""Background builds one process runs at once (every kernel family together: the Triton
sampler's variants, FlashInfer's JIT): the others wait their turn and start, in the order their
first calls asked, as running ones end; their calls are served elsewhere meanwhile, as any
call during a build is. A mixed batch can ask for a dozen variants at once, each a compiler
that takes a core (and, built in-thread, the interpreter's lock) for about 45 s."""
MAX_WARM_VOCABS = 16
"""Vocabulary sizes one ``--vocab`` (or ``--warm-vocab``) value may list: each is a group of
Triton sampler variants per dtype, about a minute of compile each on an H100."""
MAX_VOCAB_SIZE = 1 << 22
"""The largest vocabulary size ``warm`` takes (4,194,304; today's largest models have about
262,000 tokens): a size past it is a typo, not a model."""
