#!/usr/bin/env python3
"""Unit tests of tools/byteps_plan.py, the planner behind byteps-launch, byteps-slurm and
deploy/kubernetes/render.sh: for given allocations, every process's full set of variables.
    test_byteps_plan.py [TOOLS_DIR]   (default: ../../tools next to this file)"""

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

TOOLS = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")
sys.path.insert(0, TOOLS)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import byteps_plan as bp  # noqa: E402


def full_env(plan):
    """(name, every variable the process gets) for each process, in start order."""
    return [(p.name, plan.env_of(i)) for i, p in enumerate(plan.processes)]


def cli(*argv):
    """byteps_plan.py's exit status, stdout and stderr for ARGV."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = bp.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


COMMON_2x2 = {"DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "2", "DMLC_PS_ROOT_URI": "127.0.0.1"}


def worker(machine, rank, size):
    return {"DMLC_ROLE": "worker", "DMLC_WORKER_ID": str(machine),
            "BYTEPS_LOCAL_RANK": str(rank), "BYTEPS_LOCAL_SIZE": str(size)}


class LocalPlan(unittest.TestCase):
    """byteps-launch: one machine, 127.0.0.1."""

    def test_two_machines_of_two_local_ranks_and_two_servers(self):
        plan = bp.plan_local([2, 2], servers=2)
        self.assertEqual(full_env(plan), [
            ("scheduler", {**COMMON_2x2, "DMLC_ROLE": "scheduler"}),
            # Server I asks for rank I, so that "[server I]" and its "server I:" lines agree.
            ("server 0", {**COMMON_2x2, "DMLC_ROLE": "server", "BYTEPS_SERVER_ID": "0"}),
            ("server 1", {**COMMON_2x2, "DMLC_ROLE": "server", "BYTEPS_SERVER_ID": "1"}),
            ("worker 0.0", {**COMMON_2x2, **worker(0, 0, 2)}),
            ("worker 0.1", {**COMMON_2x2, **worker(0, 1, 2)}),
            ("worker 1.0", {**COMMON_2x2, **worker(1, 0, 2)}),
            ("worker 1.1", {**COMMON_2x2, **worker(1, 1, 2)}),
        ])
        self.assertEqual([p.kind for p in plan.processes],
                         ["scheduler", "server", "server", "worker", "worker", "worker", "worker"])

    def test_one_process_per_machine_is_named_by_machine_only(self):
        plan = bp.plan_local([1, 1, 1], servers=1)
        self.assertEqual([p.name for p in plan.processes],
                         ["scheduler", "server 0", "worker 0", "worker 1", "worker 2"])
        self.assertEqual(plan.env_of(4), {
            "DMLC_NUM_WORKER": "3", "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_URI": "127.0.0.1",
            **worker(2, 0, 1)})

    def test_standbys_turn_failover_on_unless_it_is_set(self):
        plan = bp.plan_local([1, 3], servers=2, standbys=1, failover_ms="")
        common = {**COMMON_2x2, "BYTEPS_FAILOVER_TIMEOUT_MS": "30000"}
        self.assertEqual(full_env(plan), [
            ("scheduler", {**common, "DMLC_ROLE": "scheduler"}),
            ("server 0", {**common, "DMLC_ROLE": "server", "BYTEPS_SERVER_ID": "0"}),
            ("server 1", {**common, "DMLC_ROLE": "server", "BYTEPS_SERVER_ID": "1"}),
            ("standby 0", {**common, "DMLC_ROLE": "server", "BYTEPS_SERVER_STANDBY": "1"}),
            ("worker 0.0", {**common, **worker(0, 0, 1)}),
            ("worker 1.0", {**common, **worker(1, 0, 3)}),
            ("worker 1.1", {**common, **worker(1, 1, 3)}),
            ("worker 1.2", {**common, **worker(1, 2, 3)}),
        ])
        self.assertEqual(dict(bp.plan_local([1], 1, 1, "0").common)["BYTEPS_FAILOVER_TIMEOUT_MS"],
                         "30000")
        self.assertEqual(dict(bp.plan_local([1], 1, 1, "20000").common)["BYTEPS_FAILOVER_TIMEOUT_MS"],
                         "20000")
        self.assertNotIn("BYTEPS_FAILOVER_TIMEOUT_MS", dict(bp.plan_local([1], 1).common))

    def test_the_records_byteps_launch_reads(self):
        rc, out, err = cli("--prog", "byteps-launch", "local", "--workers", "2", "--local-size",
                           "2", "--servers", "2")
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(out.splitlines(), [
            "every\tDMLC_NUM_WORKER=2\tDMLC_NUM_SERVER=2\tDMLC_PS_ROOT_URI=127.0.0.1",
            "task\t0\t127.0.0.1\tscheduler\tscheduler\tscheduler\tDMLC_ROLE=scheduler",
            "task\t1\t127.0.0.1\tserver\tserver 0\tserver:0:0\tDMLC_ROLE=server\tBYTEPS_SERVER_ID=0",
            "task\t2\t127.0.0.1\tserver\tserver 1\tserver:1:1\tDMLC_ROLE=server\tBYTEPS_SERVER_ID=1",
            "task\t3\t127.0.0.1\tworker\tworker 0.0\tworker:0:0:2\tDMLC_ROLE=worker\tDMLC_WORKER_ID=0"
            "\tBYTEPS_LOCAL_RANK=0\tBYTEPS_LOCAL_SIZE=2",
            "task\t4\t127.0.0.1\tworker\tworker 0.1\tworker:0:1:2\tDMLC_ROLE=worker\tDMLC_WORKER_ID=0"
            "\tBYTEPS_LOCAL_RANK=1\tBYTEPS_LOCAL_SIZE=2",
            "task\t5\t127.0.0.1\tworker\tworker 1.0\tworker:1:0:2\tDMLC_ROLE=worker\tDMLC_WORKER_ID=1"
            "\tBYTEPS_LOCAL_RANK=0\tBYTEPS_LOCAL_SIZE=2",
            "task\t6\t127.0.0.1\tworker\tworker 1.1\tworker:1:1:2\tDMLC_ROLE=worker\tDMLC_WORKER_ID=1"
            "\tBYTEPS_LOCAL_RANK=1\tBYTEPS_LOCAL_SIZE=2",
            "count\tservers=2\tstandbys=0\tworker_nodes=2\tworker_processes=4\ttasks=7",
        ])

    def test_local_sizes_set_the_machines(self):
        rc, out, _ = cli("local", "--workers", "5", "--local-sizes", "1,3")
        self.assertEqual(rc, 0)
        self.assertIn("every\tDMLC_NUM_WORKER=2\t", out)

    def test_bad_counts_are_refused_naming_the_option(self):
        for argv, message in [
            (["--workers", "0"], "--workers '0' is not valid: expected a whole number >= 1"),
            (["--servers", "x"], "--servers 'x' is not valid: expected a whole number >= 1"),
            (["--local-size", "0"], "--local-size '0' is not valid: expected a whole number >= 1"),
            (["--local-sizes", "2,0"],
             "--local-sizes '2,0' is not valid: expected whole numbers >= 1, comma-separated"),
            (["--standby-servers", "-1"],
             "--standby-servers '-1' is not valid: expected a whole number >= 0"),
        ]:
            with self.subTest(argv=argv):
                self.assertEqual(cli("--prog", "byteps-launch", "local", *argv),
                                 (2, "", f"byteps-launch: error: {message}\n"))


class CpuShares(unittest.TestCase):
    """byteps-launch --worker-cpus split: each worker process's CPUs."""

    def test_consecutive_shares_as_even_as_they_come(self):
        self.assertEqual(bp.cpu_shares([0, 1], 2), [[0], [1]])
        self.assertEqual(bp.cpu_shares(range(8), 3), [[0, 1], [2, 3, 4], [5, 6, 7]])
        self.assertEqual(bp.cpu_shares([3, 0, 2, 1], 2), [[0, 1], [2, 3]])  # in number order
        self.assertEqual(bp.cpu_shares([0, 2, 4, 6], 2), [[0, 2], [4, 6]])  # gaps kept
        self.assertEqual(bp.cpu_shares([5], 1), [[5]])

    def test_fewer_cpus_than_processes_binds_nobody(self):
        self.assertEqual(bp.cpu_shares([0, 1], 4), [])
        self.assertEqual(bp.cpu_shares([0, 1], 0), [])

    def test_a_core_s_hardware_threads_go_to_one_worker(self):
        # 4 cores x 2 threads, numbered as Linux usually does: CPU c and c + 4 are one core's.
        cores = {c: (0, c % 4) for c in range(8)}
        self.assertEqual(bp.cpu_shares(range(8), 2, cores), [[0, 1, 4, 5], [2, 3, 6, 7]])
        self.assertEqual(bp.cpu_shares(range(8), 3, cores), [[0, 4], [1, 5], [2, 3, 6, 7]])
        # More workers than cores, not than CPUs: then the threads are shared out one by one,
        # a core's threads next to each other.
        self.assertEqual(bp.cpu_shares(range(8), 8, cores),
                         [[0], [4], [1], [5], [2], [6], [3], [7]])
        self.assertEqual(bp.cpu_shares(range(8), 6, cores),
                         [[0], [4], [1, 5], [2], [6], [3, 7]])
        # Two packages: cores of one package before the other's.
        two = {0: (1, 0), 1: (1, 1), 2: (0, 0), 3: (0, 1)}
        self.assertEqual(bp.cpu_shares(range(4), 2, two), [[2, 3], [0, 1]])
        # A CPU the topology does not describe: by number, as without one.
        self.assertEqual(bp.cpu_shares(range(8), 2, {0: (0, 0)}), [[0, 1, 2, 3], [4, 5, 6, 7]])

    def test_lists_as_taskset_takes_them(self):
        self.assertEqual(bp.cpu_list([0, 1, 2, 3, 8]), "0-3,8")
        self.assertEqual(bp.cpu_list([7]), "7")
        self.assertEqual(bp.cpu_list([0, 2, 3, 4, 6]), "0,2-4,6")
        self.assertEqual(bp.parse_cpu_list("0-3,8"), [0, 1, 2, 3, 8])

    def test_the_command_byteps_launch_runs(self):
        self.assertEqual(cli("cpu-shares", "--processes", "2", "--cpus", "0-3"),
                         (0, "0-1\n2-3\n", ""))
        self.assertEqual(cli("cpu-shares", "--processes", "3", "--cpus", "0,1"), (0, "", ""))
        refusals = {
            ("--cpus", "3-1"): "--cpus '3-1' is not valid: expected CPUs and ranges such as 0-3,8",
            ("--processes", "x"): "--processes 'x' is not valid: expected a whole number >= 1",
        }
        for (option, value), message in refusals.items():
            argv = {"--processes": "2", option: value}
            rc, out, err = cli("--prog", "byteps-launch", "cpu-shares",
                               *[word for pair in argv.items() for word in pair])
            self.assertEqual((rc, out, err), (2, "", f"byteps-launch: error: {message}\n"))


class SlurmPlan(unittest.TestCase):
    """byteps-slurm: tasks node by node, as one srun step."""

    def test_two_nodes_of_two_tasks_with_a_colocated_server_each(self):
        plan = bp.plan_slurm(["node1", "node2"], bp.SlurmLayout(), tasks_per_node="2(x2)",
                             root_uri="10.0.0.1", port="20007")
        common = {"DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "2", "DMLC_PS_ROOT_URI": "10.0.0.1",
                  "DMLC_PS_ROOT_PORT": "20007"}
        self.assertEqual(full_env(plan), [
            ("scheduler", {**common, "DMLC_ROLE": "scheduler"}),
            ("server 0", {**common, "DMLC_ROLE": "server", "BYTEPS_SERVER_ID": "0"}),
            ("worker 0.0", {**common, **worker(0, 0, 2)}),
            ("worker 0.1", {**common, **worker(0, 1, 2)}),
            ("server 1", {**common, "DMLC_ROLE": "server", "BYTEPS_SERVER_ID": "1"}),
            ("worker 1.0", {**common, **worker(1, 0, 2)}),
            ("worker 1.1", {**common, **worker(1, 1, 2)}),
        ])
        self.assertEqual([p.host for p in plan.processes], ["node1"] * 4 + ["node2"] * 3)
        self.assertEqual(" ".join(p.entry for p in plan.processes),
                         "scheduler server:0:0 worker:0:0:2 worker:0:1:2 server:1:1 worker:1:0:2 "
                         "worker:1:1:2")
        self.assertEqual(plan.nodes, (("node1", "scheduler, server 0, worker 0.0, worker 0.1"),
                                      ("node2", "server 1, worker 1.0, worker 1.1")))

    def test_mixed_mode_gives_colocated_servers_the_first_ranks(self):
        plan = bp.plan_slurm(["r1-n01", "r1-n02", "r2-n01", "r2-n02"],
                             bp.SlurmLayout(server_nodes="1", mixed=True),
                             tasks_per_node="3,1,1,2", root_uri="10.0.0.1", port="29500",
                             node_host="10.1.0.9")
        common = {"DMLC_NUM_WORKER": "3", "DMLC_NUM_SERVER": "4", "DMLC_PS_ROOT_URI": "10.0.0.1",
                  "DMLC_PS_ROOT_PORT": "29500", "BYTEPS_ENABLE_MIXED_MODE": "1"}

        def server(rank):
            return {**common, "DMLC_ROLE": "server", "BYTEPS_SERVER_ID": str(rank),
                    "DMLC_NODE_HOST": "10.1.0.9"}
        self.assertEqual(full_env(plan), [
            ("scheduler", {**common, "DMLC_ROLE": "scheduler"}),
            ("server 0", server(0)),
            ("worker 0.0", {**common, **worker(0, 0, 3)}),
            ("worker 0.1", {**common, **worker(0, 1, 3)}),
            ("worker 0.2", {**common, **worker(0, 2, 3)}),
            ("server 1", server(1)),
            ("worker 1.0", {**common, **worker(1, 0, 1)}),
            ("server 2", server(2)),
            ("worker 2.0", {**common, **worker(2, 0, 1)}),
            ("server 3", server(3)),
        ])
        self.assertEqual(plan.nodes[3], ("r2-n02", "server 3 (rank 3)"))

    def test_standbys_go_to_the_server_nodes_in_turn(self):
        plan = bp.plan_slurm(["a", "b", "c"],
                             bp.SlurmLayout(server_nodes="1", standby_servers="2",
                                            workers_per_node="2"),
                             tasks_per_node="1(x3)", root_uri="10.0.0.1", port="20003")
        self.assertEqual([(p.host, p.name) for p in plan.processes], [
            ("a", "scheduler"), ("a", "worker 0.0"), ("a", "worker 0.1"), ("b", "worker 1.0"),
            ("b", "worker 1.1"), ("c", "server 0"), ("c", "standby 0"), ("c", "standby 1")])
        self.assertEqual(plan.env_of(6), {
            "DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_URI": "10.0.0.1",
            "DMLC_PS_ROOT_PORT": "20003", "BYTEPS_FAILOVER_TIMEOUT_MS": "30000",
            "DMLC_ROLE": "server", "BYTEPS_SERVER_STANDBY": "1"})

    def test_ntasks_per_node_stands_for_every_node(self):
        plan = bp.plan_slurm(["gpu07", "gpu08", "cpu1", "cpu3"],
                             bp.SlurmLayout(server_nodes="2", servers_per_node="2"),
                             ntasks_per_node="1")
        self.assertEqual([(p.host, p.name) for p in plan.processes], [
            ("gpu07", "scheduler"), ("gpu07", "worker 0"), ("gpu08", "worker 1"),
            ("cpu1", "server 0"), ("cpu1", "server 1"), ("cpu3", "server 2"), ("cpu3", "server 3")])

    def test_layouts_that_cannot_be_a_job(self):
        two = ["node1", "node2"]
        for hosts, layout, counts, message in [
            (two, bp.SlurmLayout(mixed=True), "2(x2)",
             "--mixed needs --server-nodes >= 1 (the CPU servers of mixed mode)"),
            (two, bp.SlurmLayout(server_nodes="2"), "2(x2)",
             "--server-nodes 2 leaves no worker node: the allocation has 2 node(s)"),
            (two, bp.SlurmLayout(), "2,1,1", "SLURM_TASKS_PER_NODE '2,1,1' gives 3 counts for 2 nodes"),
            (two, bp.SlurmLayout(), "", "neither SLURM_TASKS_PER_NODE nor SLURM_NTASKS_PER_NODE is set"),
            (two, bp.SlurmLayout(colocated_servers="0"), "1(x2)",
             "no server: use --colocated-servers or --server-nodes"),
            (two, bp.SlurmLayout(), "0,1", "node node1 has no task"),
            (two, bp.SlurmLayout(server_nodes="x"), "1(x2)",
             "--server-nodes 'x' is not valid: expected a whole number >= 0"),
        ]:
            with self.subTest(message=message):
                with self.assertRaises(bp.PlanError) as e:
                    bp.plan_slurm(hosts, layout, tasks_per_node=counts)
                self.assertIn(message, str(e.exception))

    def test_a_task_gets_its_entry_s_variables(self):
        plan = "scheduler server:0 worker:0:0:2 worker:0:1:2 server:1 worker:1:0:2 worker:1:1:2"
        self.assertEqual(cli("task", "--plan", plan, "--index", "3"), (0, (
            "task\t0\t-\tworker\tworker 0.1\tworker:0:1:2\tDMLC_ROLE=worker\tDMLC_WORKER_ID=0\t"
            "BYTEPS_LOCAL_RANK=1\tBYTEPS_LOCAL_SIZE=2\n"), ""))
        self.assertEqual(cli("task", "--plan", plan, "--index", "4", "--node-host", "10.0.0.2"),
                         (0, "task\t0\t-\tserver\tserver 1\tserver:1\tDMLC_ROLE=server\t"
                             "DMLC_NODE_HOST=10.0.0.2\n", ""))
        self.assertEqual(cli("--prog", "byteps-slurm", "task", "--plan", plan, "--index", "7"),
                         (2, "", "byteps-slurm: error: task 7 has no entry in the plan "
                                 "(7 entries)\n"))

    def test_counts_and_host_lists(self):
        self.assertEqual(bp.expand_counts("2(x3),1"), [2, 2, 2, 1])
        self.assertEqual(bp.expand_hostlist("node[01-03,7],gpu[1-2]-ib,login"),
                         ["node01", "node02", "node03", "node7", "gpu1-ib", "gpu2-ib", "login"])
        self.assertEqual(bp.expand_hostlist("r[1-2]-n[01-02]"),
                         ["r1-n01", "r1-n02", "r2-n01", "r2-n02"])
        with self.assertRaises(bp.PlanError):
            bp.expand_counts("2(x)")
        with self.assertRaises(bp.PlanError):
            bp.expand_hostlist("node[a-b]")

    @unittest.skipUnless(shutil.which("scontrol"), "scontrol is not installed")
    def test_host_lists_as_scontrol_expands_them(self):
        # byteps-slurm asks scontrol; the planner's own expansion (dry runs away from a cluster)
        # must give the same hosts. scontrol needs a configuration, even for this.
        with tempfile.NamedTemporaryFile("w", suffix=".conf") as conf:
            conf.write("ClusterName=plan\nSlurmctldHost=localhost\n")
            conf.flush()
            for hostlist in ["node[01-03,7],login", "r[1-2]-n[01-02]", "a,b,c",
                             "cpu[1,3],gpu[07-08]", "x[098-101]"]:
                with self.subTest(hostlist=hostlist):
                    got = subprocess.run(["scontrol", "show", "hostnames", hostlist],
                                         env={**os.environ, "SLURM_CONF": conf.name},
                                         capture_output=True, text=True, check=True)
                    self.assertEqual(bp.expand_hostlist(hostlist), got.stdout.split())


class KubernetesPlan(unittest.TestCase):
    """render.sh: one template per role, the pod's index is its rank."""

    def test_roles_counts_and_variables(self):
        plan = bp.plan_kubernetes("demo", workers="3", servers="2", standbys="1",
                                  failover_ms="60000")
        self.assertEqual(dict(plan.common), {
            "DMLC_NUM_WORKER": "3", "DMLC_NUM_SERVER": "2", "DMLC_PS_ROOT_URI": "demo-scheduler",
            "DMLC_PS_ROOT_PORT": "9000", "BYTEPS_FAILOVER_TIMEOUT_MS": "60000"})
        self.assertEqual([(p.kind, p.count, dict(p.env)) for p in plan.processes], [
            ("scheduler", 1, {"DMLC_ROLE": "scheduler", "DMLC_PS_ROOT_URI": "0.0.0.0"}),
            ("server", 2, {"DMLC_ROLE": "server", "BYTEPS_SERVER_ID": bp.POD_INDEX,
                           "DMLC_NODE_HOST": bp.POD_IP, "BYTEPS_SERVER_PORT": "9100"}),
            ("standby", 1, {"DMLC_ROLE": "server", "BYTEPS_SERVER_STANDBY": "1",
                            "DMLC_NODE_HOST": bp.POD_IP, "BYTEPS_SERVER_PORT": "9100"}),
            ("worker", 3, {"DMLC_ROLE": "worker", "DMLC_WORKER_ID": bp.COMPLETION_INDEX,
                           "BYTEPS_LOCAL_SIZE": "1"}),
        ])

    def test_template_values(self):
        rc, out, err = cli("kubernetes", "--job", "demo", "--workers", "3", "--servers", "2")
        self.assertEqual((rc, err), (0, ""))
        values = {}
        for line in out.splitlines():
            if line.startswith("@") and line.endswith("@"):
                key = line.strip("@")
                values[key] = []
            else:
                values[key].append(line)
        self.assertEqual(values["WORKERS"], ["3"])
        self.assertEqual(values["SERVERS"], ["2"])
        self.assertEqual(values["STANDBYS"], ["0"])
        self.assertEqual(values["FAILOVER_MS"], ["60000"])
        self.assertEqual(values["PLAN_CONFIG"], [
            '  DMLC_NUM_WORKER: "3"', '  DMLC_NUM_SERVER: "2"',
            '  DMLC_PS_ROOT_URI: "demo-scheduler"', '  DMLC_PS_ROOT_PORT: "9000"'])
        self.assertEqual(values["WORKER_ENV"], [
            "            - name: DMLC_ROLE",
            '              value: "worker"',
            "            - name: DMLC_WORKER_ID",
            "              valueFrom:",
            "                fieldRef:",
            "                  fieldPath: metadata.annotations['batch.kubernetes.io/job-completion-index']",
            "            - name: BYTEPS_LOCAL_SIZE",
            '              value: "1"'])

    def test_sizes_that_cannot_be_a_job(self):
        self.assertEqual(cli("--prog", "render.sh", "kubernetes", "--standby", "1",
                             "--failover-ms", "0"),
                         (2, "", "render.sh: error: --standby needs server failover: "
                                 "--failover-ms above 0\n"))
        self.assertEqual(cli("--prog", "render.sh", "kubernetes", "--servers", "0")[2],
                         "render.sh: error: --servers '0' is not valid: expected a whole number "
                         ">= 1\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
