#!/usr/bin/env python3
"""byteps_plan: the one plan of a byteps job, for the three launchers.

An allocation goes in (worker machines and their local sizes, servers, standbys, and for Slurm
the nodes and their tasks); the roles and each process's variables come out. byteps-launch (one
machine), byteps-slurm (a Slurm allocation) and deploy/kubernetes/render.sh (manifests) call it
and keep to what is theirs: their options, their environment (Slurm's variables, addresses), and
starting the processes. docs/deploy.md#the-planner says why this is Python.

A process is named as byteps-launch prefixes its output ("scheduler", "server 1", "standby 0",
"worker 2" or "worker 2.1"), and a server named "server I" has rank I wherever the launcher can
give it (BYTEPS_SERVER_ID), so that the prefix agrees with what the server logs.

The standard library only, Python 3.8 or newer. `byteps_plan.py --help` lists the commands; the
unit tests are tests/deploy/test_byteps_plan.py.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

# ------------------------------------------------------------------------------------------------
# The plan.


class PlanError(ValueError):
    """An allocation or a layout that cannot be a job; the message names the option at fault."""


@dataclass(frozen=True)
class FieldRef:
    """A value Kubernetes fills in per pod (the downward API), e.g. the pod's index."""

    path: str


Value = Union[str, FieldRef]


@dataclass(frozen=True)
class Process:
    """One process of the job, or under Kubernetes one role's pods (`count` of them)."""

    kind: str  # scheduler, server, standby or worker
    name: str  # its output prefix: "server 1", "worker 0.1"
    entry: str  # its compact form (byteps-slurm --task --plan): "server:1", "worker:0:1:2"
    env: Tuple[Tuple[str, Value], ...]  # its own variables, DMLC_ROLE first
    host: str = ""
    count: int = 1


@dataclass(frozen=True)
class Plan:
    common: Tuple[Tuple[str, Value], ...]  # every process gets these
    processes: Tuple[Process, ...]  # in start order (under Slurm: task order)
    nodes: Tuple[Tuple[str, str], ...] = ()  # (host, what runs there), Slurm only

    def env_of(self, i: int) -> Dict[str, Value]:
        """Everything process `i` gets: the common variables, then its own."""
        env = dict(self.common)
        env.update(self.processes[i].env)
        return env

    def count(self, kind: str) -> int:
        return sum(p.count for p in self.processes if p.kind == kind)


# ------------------------------------------------------------------------------------------------
# One role's variables: every launcher goes through here.


def process_of(entry: str, local_names: bool, node_host: str = "", host: str = "") -> Process:
    """The process of a plan entry: "scheduler", "server:I[:ID]", "standby:I" or
    "worker:MACHINE:LOCAL_RANK:LOCAL_SIZE". `local_names`: some machine runs several worker
    processes, so workers are named "worker M.L"; `node_host`: DMLC_NODE_HOST of servers."""
    fields = entry.split(":")
    kind = fields[0]

    def ints(n: int) -> List[int]:
        if len(fields) != n + 1 or not all(f.isdigit() for f in fields[1:]):
            raise PlanError(f"bad plan entry '{entry}'")
        return [int(f) for f in fields[1:]]

    env: List[Tuple[str, Value]]
    if kind == "scheduler" and len(fields) == 1:
        return Process(kind, "scheduler", entry, (("DMLC_ROLE", "scheduler"),), host)
    if kind == "server":
        ids = ints(2) if len(fields) == 3 else ints(1)
        env = [("DMLC_ROLE", "server")]
        if len(ids) == 2:
            env.append(("BYTEPS_SERVER_ID", str(ids[1])))
        if node_host:
            env.append(("DMLC_NODE_HOST", node_host))
        return Process(kind, f"server {ids[0]}", entry, tuple(env), host)
    if kind == "standby":
        (s,) = ints(1)
        env = [("DMLC_ROLE", "server"), ("BYTEPS_SERVER_STANDBY", "1")]
        if node_host:
            env.append(("DMLC_NODE_HOST", node_host))
        return Process(kind, f"standby {s}", entry, tuple(env), host)
    if kind == "worker":
        machine, rank, size = ints(3)
        if rank >= size:
            raise PlanError(f"bad plan entry '{entry}': local rank {rank} of {size}")
        name = f"worker {machine}.{rank}" if local_names else f"worker {machine}"
        env = [("DMLC_ROLE", "worker"), ("DMLC_WORKER_ID", str(machine)),
               ("BYTEPS_LOCAL_RANK", str(rank)), ("BYTEPS_LOCAL_SIZE", str(size))]
        return Process(kind, name, entry, tuple(env), host)
    raise PlanError(f"bad plan entry '{entry}'")


def has_local_names(entries: Sequence[str]) -> bool:
    """Whether some worker entry has a local size above 1 (workers are then named "worker M.L")."""
    return any(e.startswith("worker:") and e.split(":")[-1] != "1" for e in entries)


def plan_of_entries(entries: Sequence[str], hosts: Sequence[str] = (), node_host: str = "",
                    common: Sequence[Tuple[str, Value]] = ()) -> Plan:
    local = has_local_names(entries)
    hosts = list(hosts) or [""] * len(entries)
    processes = tuple(process_of(e, local, node_host if e.startswith(("server", "standby")) else "",
                                 h) for e, h in zip(entries, hosts))
    return Plan(tuple(common), processes)


def failover_env(failover_ms: str, standbys: int) -> List[Tuple[str, Value]]:
    """BYTEPS_FAILOVER_TIMEOUT_MS as the job gets it: standbys need failover on, on every node,
    so they turn it on (30000) when it is unset or 0; a value set stays."""
    on = re.fullmatch(r"0*[1-9][0-9]*", failover_ms or "") is not None
    if standbys > 0 and not on:
        return [("BYTEPS_FAILOVER_TIMEOUT_MS", "30000")]
    return [("BYTEPS_FAILOVER_TIMEOUT_MS", failover_ms)] if failover_ms else []


# ------------------------------------------------------------------------------------------------
# Counts as the front ends' options give them.


def whole(option: str, text: Union[str, int], least: int) -> int:
    """`text` as a whole number >= least, else a PlanError naming `option`."""
    s = str(text)
    if not re.fullmatch(r"[0-9]+", s) or int(s) < least:
        raise PlanError(f"{option} '{s}' is not valid: expected a whole number >= {least}")
    return int(s)


def local_sizes_of(workers: str, local_size: str, local_sizes: str) -> List[int]:
    """Each worker machine's local size, from --workers and --local-size or --local-sizes."""
    machines = whole("--workers", workers, 1)
    size = whole("--local-size", local_size, 1)
    if local_sizes:
        parts = local_sizes.split(",")
        if not all(re.fullmatch(r"[0-9]+", p) and int(p) >= 1 for p in parts):
            raise PlanError(f"--local-sizes '{local_sizes}' is not valid: expected whole numbers "
                            ">= 1, comma-separated")
        return [int(p) for p in parts]
    return [size] * machines


def expand_counts(counts: str) -> List[int]:
    """SLURM_TASKS_PER_NODE's format: "2(x3),1" is [2, 2, 2, 1]."""
    out: List[int] = []
    for item in counts.split(","):
        m = re.fullmatch(r"([0-9]+)\(x([0-9]+)\)", item)
        if m:
            out += [int(m.group(1))] * int(m.group(2))
        elif re.fullmatch(r"[0-9]+", item):
            out.append(int(item))
        else:
            raise PlanError(f"cannot read task counts '{counts}'")
    return out


def expand_hostlist(hostlist: str) -> List[str]:
    """A Slurm host list ("node[01-03,7],gpu[1-2]-ib,login") as its hosts, in order.

    byteps-slurm asks `scontrol show hostnames` first; this is what it uses where scontrol
    cannot run (a dry run away from a Slurm cluster). tests/deploy/test_byteps_plan.py checks
    that both agree when a scontrol is there."""
    hosts: List[str] = []
    depth, item = 0, ""
    for c in hostlist + ",":
        if c == "," and depth == 0:
            if item:
                hosts += _expand_host(item)
            item = ""
            continue
        depth += {"[": 1, "]": -1}.get(c, 0)
        item += c
    return hosts


def _expand_host(name: str) -> List[str]:
    m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", name)
    if not m:
        if "[" in name or "]" in name:
            raise PlanError(f"cannot read host list entry '{name}'")
        return [name]
    prefix, ranges, rest = m.groups()
    hosts: List[str] = []
    for r in ranges.split(","):
        lo_hi = re.fullmatch(r"([0-9]+)-([0-9]+)", r)
        if lo_hi:
            lo, hi = lo_hi.groups()
            numbers = [str(n).zfill(len(lo)) for n in range(int(lo), int(hi) + 1)]
        elif re.fullmatch(r"[0-9]+", r):
            numbers = [r]
        else:
            raise PlanError(f"cannot read range '{r}' in host list entry '{name}'")
        for n in numbers:
            hosts += _expand_host(prefix + n + rest)
    return hosts


# ------------------------------------------------------------------------------------------------
# One machine: byteps-launch.


def plan_local(local_sizes: Sequence[int], servers: int, standbys: int = 0,
               failover_ms: str = "") -> Plan:
    """A job on 127.0.0.1: the scheduler, `servers` servers (server I asks for rank I), the
    standbys, then each machine's worker processes. The launcher adds DMLC_PS_ROOT_PORT (the
    scheduler picks a free one)."""
    if not local_sizes or servers < 1 or standbys < 0 or min(local_sizes) < 1:
        raise PlanError("a job needs at least one worker machine and one server")
    entries = ["scheduler"] + [f"server:{i}:{i}" for i in range(servers)]
    entries += [f"standby:{s}" for s in range(standbys)]
    for m, n in enumerate(local_sizes):
        entries += [f"worker:{m}:{l}:{n}" for l in range(n)]
    common = [("DMLC_NUM_WORKER", str(len(local_sizes))), ("DMLC_NUM_SERVER", str(servers)),
              ("DMLC_PS_ROOT_URI", "127.0.0.1")] + failover_env(failover_ms, standbys)
    return plan_of_entries(entries, ["127.0.0.1"] * len(entries), common=common)


# ------------------------------------------------------------------------------------------------
# A Slurm allocation: byteps-slurm.


@dataclass
class SlurmLayout:
    """byteps-slurm's layout options, as given (strings are checked by `plan_slurm`)."""

    server_nodes: str = "0"
    servers_per_node: str = "1"
    colocated_servers: str = ""  # empty: 1 with no server nodes or with --mixed, else 0
    mixed: bool = False
    standby_servers: str = "0"
    workers_per_node: str = ""  # empty: the allocation's tasks on each node


def plan_slurm(hosts: Sequence[str], layout: SlurmLayout, tasks_per_node: str = "",
               ntasks_per_node: str = "", root_uri: str = "", port: str = "",
               failover_ms: str = "", node_host: str = "") -> Plan:
    """Tasks node by node: on the first node the scheduler, then on each node its servers, its
    standbys, then its workers. `tasks_per_node` and `ntasks_per_node` are SLURM_TASKS_PER_NODE
    and SLURM_NTASKS_PER_NODE (either may be empty)."""
    server_nodes = whole("--server-nodes", layout.server_nodes, 0)
    servers_per_node = whole("--servers-per-node", layout.servers_per_node, 1)
    standbys = whole("--standby-servers", layout.standby_servers, 0)
    colocated = layout.colocated_servers
    colocated = whole("--colocated-servers", colocated, 0) if colocated != "" else int(
        server_nodes == 0 or layout.mixed)
    if layout.mixed and server_nodes < 1:
        raise PlanError("--mixed needs --server-nodes >= 1 (the CPU servers of mixed mode)")
    if layout.mixed and colocated != 1:
        raise PlanError("--mixed runs exactly one colocated server on each worker node "
                        "(--colocated-servers 1)")
    if layout.workers_per_node:
        workers_per_node = whole("--workers-per-node", layout.workers_per_node, 1)
    nodes = list(hosts)
    if not nodes:
        raise PlanError("the allocation has no node")
    if server_nodes >= len(nodes):
        raise PlanError(f"--server-nodes {server_nodes} leaves no worker node: the allocation "
                        f"has {len(nodes)} node(s)")
    worker_nodes = len(nodes) - server_nodes
    if layout.workers_per_node:
        per_node = [workers_per_node] * worker_nodes
    else:
        counts = tasks_per_node or (f"{ntasks_per_node}(x{len(nodes)})" if ntasks_per_node else "")
        if not counts:
            raise PlanError("neither SLURM_TASKS_PER_NODE nor SLURM_NTASKS_PER_NODE is set; pass "
                            "--workers-per-node N")
        all_counts = expand_counts(counts)
        if len(all_counts) != len(nodes):
            raise PlanError(f"SLURM_TASKS_PER_NODE '{counts}' gives {len(all_counts)} counts for "
                            f"{len(nodes)} nodes")
        for i in range(worker_nodes):
            if all_counts[i] < 1:
                raise PlanError(f"node {nodes[i]} has no task: every worker node needs at least one")
        per_node = all_counts[:worker_nodes]
    num_servers = colocated * worker_nodes + servers_per_node * server_nodes
    if num_servers < 1:
        raise PlanError("no server: use --colocated-servers or --server-nodes")

    standby_on = [worker_nodes + s % server_nodes if server_nodes else s % worker_nodes
                  for s in range(standbys)]
    entries: List[str] = []
    entry_hosts: List[str] = []
    descriptions: List[Tuple[str, str]] = []
    local = any(n > 1 for n in per_node)
    rank = 0
    for i, host in enumerate(nodes):
        here: List[str] = ["scheduler"] if i == 0 else []
        n_servers = colocated if i < worker_nodes else servers_per_node
        for _ in range(n_servers):
            # Each server asks for its rank, which its prefix names. Worker nodes come first, one
            # colocated server each in mixed mode, so its colocated servers get ranks 0 ..
            # workers-1, as mixed mode needs.
            here.append(f"server:{rank}:{rank}")
            rank += 1
        here += [f"standby:{s}" for s in range(standbys) if standby_on[s] == i]
        if i < worker_nodes:
            here += [f"worker:{i}:{l}:{per_node[i]}" for l in range(per_node[i])]
        entries += here
        entry_hosts += [host] * len(here)
        names = []
        for e in here:
            p = process_of(e, local)
            f = e.split(":")
            names.append(p.name + (f" (rank {f[2]})" if layout.mixed and p.kind == "server" else ""))
        descriptions.append((host, ", ".join(names)))

    common: List[Tuple[str, Value]] = [("DMLC_NUM_WORKER", str(worker_nodes)),
                                       ("DMLC_NUM_SERVER", str(num_servers))]
    if root_uri:
        common.append(("DMLC_PS_ROOT_URI", root_uri))
    if port:
        common.append(("DMLC_PS_ROOT_PORT", str(int(port))))
    if layout.mixed:
        common.append(("BYTEPS_ENABLE_MIXED_MODE", "1"))
    common += failover_env(failover_ms, standbys)
    plan = plan_of_entries(entries, entry_hosts, node_host, common)
    return Plan(plan.common, plan.processes, tuple(descriptions))


# ------------------------------------------------------------------------------------------------
# Kubernetes: render.sh. Pods of one role share a template; the pod's index is its rank.

POD_INDEX = FieldRef("metadata.labels['apps.kubernetes.io/pod-index']")
COMPLETION_INDEX = FieldRef("metadata.annotations['batch.kubernetes.io/job-completion-index']")
POD_IP = FieldRef("status.podIP")
K8S_SCHEDULER_PORT = "9000"
K8S_SERVER_PORT = "9100"


def plan_kubernetes(job: str, workers: str, servers: str, standbys: str = "0",
                    failover_ms: str = "60000") -> Plan:
    """The scheduler (a Deployment behind Service JOB-scheduler), the servers (a StatefulSet:
    pod K asks for rank K), the standbys (a StatefulSet), the workers (an indexed Job: completion
    K is machine K, one worker process each). Options as render.sh's."""
    w = whole("--workers", workers, 1)
    s = whole("--servers", servers, 1)
    k = whole("--standby", standbys, 0)
    f = whole("--failover-ms", failover_ms, 0)
    if k > 0 and f == 0:
        raise PlanError("--standby needs server failover: --failover-ms above 0")
    common: Tuple[Tuple[str, Value], ...] = (
        ("DMLC_NUM_WORKER", str(w)), ("DMLC_NUM_SERVER", str(s)),
        ("DMLC_PS_ROOT_URI", f"{job}-scheduler"), ("DMLC_PS_ROOT_PORT", K8S_SCHEDULER_PORT),
        ("BYTEPS_FAILOVER_TIMEOUT_MS", str(f)))
    server_env = (("DMLC_ROLE", "server"), ("BYTEPS_SERVER_ID", POD_INDEX),
                  ("DMLC_NODE_HOST", POD_IP), ("BYTEPS_SERVER_PORT", K8S_SERVER_PORT))
    standby_env = (("DMLC_ROLE", "server"), ("BYTEPS_SERVER_STANDBY", "1"),
                   ("DMLC_NODE_HOST", POD_IP), ("BYTEPS_SERVER_PORT", K8S_SERVER_PORT))
    processes = [
        # Listens on every address of its pod; the others reach it through the Service.
        Process("scheduler", "scheduler", "scheduler",
                (("DMLC_ROLE", "scheduler"), ("DMLC_PS_ROOT_URI", "0.0.0.0"))),
        Process("server", "server", "server", server_env, count=s),
        Process("standby", "standby", "standby", standby_env, count=k),
        Process("worker", "worker", "worker",
                (("DMLC_ROLE", "worker"), ("DMLC_WORKER_ID", COMPLETION_INDEX),
                 ("BYTEPS_LOCAL_SIZE", "1")), count=w),
    ]
    return Plan(common, tuple(processes))


def yaml_env(env: Sequence[Tuple[str, Value]], indent: int) -> str:
    """A container's `env:` list, its items indented by `indent` spaces."""
    pad = " " * indent
    lines = []
    for name, value in env:
        lines.append(f"{pad}- name: {name}")
        if isinstance(value, FieldRef):
            lines += [f"{pad}  valueFrom:", f"{pad}    fieldRef:",
                      f"{pad}      fieldPath: {value.path}"]
        else:
            lines.append(f"{pad}  value: \"{value}\"")
    return "\n".join(lines)


def kubernetes_values(plan: Plan) -> Dict[str, str]:
    """The templates' placeholders that come from the plan (deploy/kubernetes/templates)."""
    common = dict(plan.common)
    by_kind = {p.kind: p for p in plan.processes}
    values = {
        "WORKERS": str(plan.count("worker")),
        "SERVERS": str(plan.count("server")),
        "STANDBYS": str(plan.count("standby")),
        "FAILOVER_MS": str(common["BYTEPS_FAILOVER_TIMEOUT_MS"]),
        "PLAN_CONFIG": "\n".join(f"  {k}: \"{v}\"" for k, v in plan.common
                                 if k != "BYTEPS_FAILOVER_TIMEOUT_MS"),
    }
    for kind in ("scheduler", "server", "standby", "worker"):
        values[f"{kind.upper()}_ENV"] = yaml_env(by_kind[kind].env, 12)
    return values


# ------------------------------------------------------------------------------------------------
# Output for the bash front ends: tab-separated, one record a line.


def _check_field(v: str) -> str:
    if "\t" in v or "\n" in v:
        raise PlanError(f"'{v!r}' holds a tab or a newline")
    return v


def tsv(plan: Plan) -> str:
    """every<TAB>K=V...; task<TAB>I<TAB>HOST (- if none)<TAB>KIND<TAB>NAME<TAB>ENTRY<TAB>K=V...;
    node<TAB>HOST<TAB>DESCRIPTION; count<TAB>servers=N<TAB>standbys=N<TAB>worker_nodes=N<TAB>
    worker_processes=N<TAB>tasks=N."""
    def kv(env):
        return [_check_field(f"{k}={v}") for k, v in env]

    rows = [["every"] + kv(plan.common)]
    for i, p in enumerate(plan.processes):
        # No field is empty: bash's `read` (IFS=tab) would drop it.
        rows.append(["task", str(i), _check_field(p.host) or "-", p.kind, p.name, p.entry]
                    + kv(p.env))
    rows += [["node", _check_field(h), d] for h, d in plan.nodes]
    machines = {p.entry.split(":")[1] for p in plan.processes if p.kind == "worker"}
    rows.append(["count", f"servers={plan.count('server')}", f"standbys={plan.count('standby')}",
                 f"worker_nodes={len(machines)}", f"worker_processes={plan.count('worker')}",
                 f"tasks={len(plan.processes)}"])
    return "".join("\t".join(r) + "\n" for r in rows)


# ------------------------------------------------------------------------------------------------
# byteps-launch --worker-cpus split: each worker process's share of the machine's CPUs.


def cpu_shares(cpus: Sequence[int], processes: int,
               core_of: Optional[Dict[int, Tuple[int, int]]] = None) -> List[List[int]]:
    """The CPUs of each of `processes` worker processes: `cpus` (those the launcher may use) cut
    into consecutive shares as even as they come, whole cores (`core_of`: cpu -> (package,
    core), a core's hardware threads as one) where there are at least as many cores as
    processes, so two workers never share a core's threads. [] when there are fewer CPUs than
    processes: then nobody is bound."""
    if processes < 1 or processes > len(cpus):
        return []
    if not core_of or any(c not in core_of for c in cpus):
        core_of = {c: (0, c) for c in cpus}  # no topology: each CPU a core, in number order
    cores: Dict[Tuple[int, int], List[int]] = {}
    for c in sorted(cpus):
        cores.setdefault(core_of[c], []).append(c)
    groups = [cores[k] for k in sorted(cores)]
    if len(groups) < processes:  # fewer cores than workers: share the cores' threads instead
        groups = [[c] for g in groups for c in g]
    n = len(groups)
    return [sorted(c for g in groups[i * n // processes:(i + 1) * n // processes] for c in g)
            for i in range(processes)]


def cpu_list(cpus: Sequence[int]) -> str:
    """CPUs as taskset -c takes them: "0-3,8"."""
    runs: List[List[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_cpu_list(text: str) -> List[int]:
    """"0-3,8" as [0, 1, 2, 3, 8]; a PlanError naming --cpus otherwise."""
    cpus = set()
    for part in text.split(","):
        m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part.strip())
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise PlanError(f"--cpus '{text}' is not valid: expected CPUs and ranges such as "
                            "0-3,8")
        cpus.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return sorted(cpus)


def this_machine_cores(cpus: Sequence[int]) -> Dict[int, Tuple[int, int]]:
    """cpu -> (package, core) from sysfs; CPUs it does not describe are left out (and then
    cpu_shares goes by CPU number)."""
    found = {}
    for c in cpus:
        base = f"/sys/devices/system/cpu/cpu{c}/topology/"
        try:
            with open(base + "physical_package_id") as pkg, open(base + "core_id") as core:
                found[c] = (int(pkg.read()), int(core.read()))
        except (OSError, ValueError):
            pass
    return found


# ------------------------------------------------------------------------------------------------
# The command line.


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="byteps_plan.py",
        description="The plan of a byteps job: the roles and each process's variables. Prints "
                    "tab-separated records (byteps-launch and byteps-slurm read them) or, for "
                    "kubernetes, the templates' values. Errors exit 2.")
    p.add_argument("--prog", default="byteps_plan.py", help="the name errors start with")
    sub = p.add_subparsers(dest="command", required=True)

    local = sub.add_parser("local", help="byteps-launch: a job on 127.0.0.1")
    local.add_argument("--workers", default="2")
    local.add_argument("--local-size", default="1")
    local.add_argument("--local-sizes", default="")
    local.add_argument("--servers", default="2")
    local.add_argument("--standby-servers", default="0")
    local.add_argument("--failover-ms", default="", help="BYTEPS_FAILOVER_TIMEOUT_MS as set")

    slurm = sub.add_parser("slurm", help="byteps-slurm: tasks of one srun step")
    slurm.add_argument("--hosts", required=True, help="the nodes, space-separated, in order")
    slurm.add_argument("--tasks-per-node", default="", help="SLURM_TASKS_PER_NODE")
    slurm.add_argument("--ntasks-per-node", default="", help="SLURM_NTASKS_PER_NODE")
    slurm.add_argument("--server-nodes", default="0")
    slurm.add_argument("--servers-per-node", default="1")
    slurm.add_argument("--colocated-servers", default="")
    slurm.add_argument("--mixed", action="store_true")
    slurm.add_argument("--standby-servers", default="0")
    slurm.add_argument("--workers-per-node", default="")
    slurm.add_argument("--root-uri", default="")
    slurm.add_argument("--port", default="")
    slurm.add_argument("--failover-ms", default="", help="BYTEPS_FAILOVER_TIMEOUT_MS as set")
    slurm.add_argument("--node-host", default="", help="DMLC_NODE_HOST of the servers")

    task = sub.add_parser("task", help="byteps-slurm --task: one entry of a plan")
    task.add_argument("--plan", required=True, help="the entries, space-separated")
    task.add_argument("--index", required=True, type=int, help="SLURM_PROCID")
    task.add_argument("--node-host", default="", help="DMLC_NODE_HOST of a server")

    hostnames = sub.add_parser("hostnames", help="a Slurm host list, one host a line")
    hostnames.add_argument("hostlist")

    shares = sub.add_parser("cpu-shares", help="byteps-launch --worker-cpus split: one line "
                            "per worker process, its CPUs as taskset -c takes them; nothing "
                            "when there are fewer CPUs than processes")
    shares.add_argument("--processes", required=True)
    shares.add_argument("--cpus", default="", help="the CPUs to share, e.g. 0-3,8 (default: "
                        "those this process may run on)")

    k8s = sub.add_parser("kubernetes", help="render.sh: the templates' values from the plan")
    k8s.add_argument("--job", default="byteps")
    k8s.add_argument("--workers", default="2")
    k8s.add_argument("--servers", default="2")
    k8s.add_argument("--standby", default="0")
    k8s.add_argument("--failover-ms", default="60000")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "local":
            sizes = local_sizes_of(args.workers, args.local_size, args.local_sizes)
            plan = plan_local(sizes, whole("--servers", args.servers, 1),
                              whole("--standby-servers", args.standby_servers, 0), args.failover_ms)
            sys.stdout.write(tsv(plan))
        elif args.command == "slurm":
            layout = SlurmLayout(args.server_nodes, args.servers_per_node, args.colocated_servers,
                                 args.mixed, args.standby_servers, args.workers_per_node)
            plan = plan_slurm(args.hosts.split(), layout, args.tasks_per_node,
                              args.ntasks_per_node, args.root_uri, args.port,
                              args.failover_ms, args.node_host)
            sys.stdout.write(tsv(plan))
        elif args.command == "task":
            entries = args.plan.split()
            if not 0 <= args.index < len(entries):
                raise PlanError(f"task {args.index} has no entry in the plan ({len(entries)} "
                                "entries)")
            p = process_of(entries[args.index], has_local_names(entries), args.node_host)
            sys.stdout.write(tsv(Plan((), (p,))).splitlines(True)[1])
        elif args.command == "cpu-shares":
            cpus = parse_cpu_list(args.cpus) if args.cpus else sorted(os.sched_getaffinity(0))
            shares = cpu_shares(cpus, whole("--processes", args.processes, 1),
                                this_machine_cores(cpus))
            sys.stdout.write("".join(cpu_list(share) + "\n" for share in shares))
        elif args.command == "hostnames":
            sys.stdout.write("".join(h + "\n" for h in expand_hostlist(args.hostlist)))
        else:
            values = kubernetes_values(plan_kubernetes(args.job, args.workers, args.servers,
                                                       args.standby, args.failover_ms))
            sys.stdout.write("".join(f"@{k}@\n{v}\n" for k, v in values.items()))
    except PlanError as e:
        print(f"{args.prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
