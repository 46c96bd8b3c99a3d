"""The hosts of a job in emulate.sh's network namespaces (PREFIX-h<i>), for the scripts that
watch one from the root namespace (link-usage.py, tcp-events.py), and the command line they
share."""
import argparse
import re
import subprocess
import time


def job_hosts():
    """{host index: [pids of the processes in it]} for emulate.sh's namespaces that hold one."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    hosts = {}
    for name in out.split():
        m = re.fullmatch(r".+-h(\d+)", name)
        if not m:
            continue
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                              text=True).stdout.split()
        if pids:
            hosts[int(m.group(1))] = pids
    return hosts


def wait_for_job(script, timeout_s=300):
    """job_hosts() once a bps-bench runs in them; exits naming `script` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-x", "bps-bench"], capture_output=True).returncode == 0:
            time.sleep(0.3)  # every host's processes have started
            hosts = job_hosts()
            if hosts:
                return hosts
        time.sleep(0.05)
    raise SystemExit(f"{script}: no job in emulated hosts within {timeout_s} s")


def record_report_parser(doc, default_interval_ms):
    """The watchers' command line: `record FILE [--interval-ms MS]` (MS above 0) and `report
    FILE`. Returns the parser and the two subcommands' parsers, for each script's own options."""
    def interval_ms(text):
        value = float(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{value:g}: must be above 0")
        return value

    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("file")
    rec.add_argument("--interval-ms", type=interval_ms, default=default_interval_ms)
    rep = sub.add_parser("report")
    rep.add_argument("file")
    return ap, rec, rep
