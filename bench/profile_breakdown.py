"""Where a job's CPU time goes: reads `perf script -F comm,ip,sym --no-inline` output of a
`mission server` recorded with call graphs (bench/profile-jobs.sh) and sorts every sample into
one part of a job's life, by its thread and the frames on its stack.

Usage: python3 bench/profile_breakdown.py SCRIPT_OUTPUT HZ JOBS
"""

import collections
import sys

# Threads of the server process and of its spawner; perf names a thread whose name it missed
# `:TID`. Any other name is a job's program.
# (Linux keeps 15 bytes of a thread's name: the launcher's thread is `mission-lz-laun`.)
SERVER_THREADS = (
    "mission", "tokio-rt-worker", "sqlx-sqlite-wor", "mission-lz-spaw", "mission-lz-job", "mission-lz-laun",
)

# (part, test) in the order they are tried: the first that matches a sample takes it.
PARTS = [
    ("sign-in (pbkdf2, once per run)", lambda comm, stack: "pbkdf2" in stack),
    ("job program (after exec)", lambda comm, stack: comm not in SERVER_THREADS and not comm.startswith(":")),
    ("job process before exec (namespaces, cgroup, uid)", lambda comm, stack: comm == "mission-lz-job"),
    ("SQLite (sqlx worker threads)", lambda comm, stack: "sqlite3" in stack or comm.startswith("sqlx")),
    # The spawner is the agent's executable started again (its thread is named `mission`).
    ("spawner process: forks of job processes", lambda comm, stack: "mission_lz::sandbox::spawner::" in stack),
    ("agent (mission_lz)", lambda comm, stack: "mission_lz::" in stack),
    ("launcher thread: plans to the spawner, pidfds back", lambda comm, stack: comm == "mission-lz-laun"),
    ("store: statements built, rows read (mission_store, sqlx)", lambda comm, stack: "mission_store::" in stack
        or "sqlx_core::" in stack or "sqlx_sqlite::" in stack),
    ("event hub and webhooks router", lambda comm, stack: "mission_server::services::events::" in stack
        or "mission_server::services::webhooks::" in stack),
    ("scheduler task", lambda comm, stack: "mission_scheduler::" in stack
        or "mission_server::services::scheduler::" in stack),
    ("HTTP server and route handlers", lambda comm, stack: any(
        s in stack for s in ("hyper::", "axum", "mission_server::http::"))),
    ("HTTP client (agent)", lambda comm, stack: "reqwest" in stack or "hyper_util::client" in stack),
    ("thread wake-ups and parking (futex, epoll)", lambda comm, stack: any(
        s in stack for s in ("futex", "park", "epoll"))),
    ("memory allocation (malloc, free)", lambda comm, stack: any(
        s in stack for s in ("malloc", "_int_free", "__libc_free", "cfree", "realloc", "__rust_dealloc"))),
    ("other (stacks too short to place)", lambda comm, stack: True),
]


def main() -> None:
    path, hz, jobs = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for sample in open(path, encoding="utf-8", errors="replace").read().split("\n\n"):
        lines = sample.strip().split("\n")
        if not lines or not lines[0].strip():
            continue
        comm = lines[0].strip().split()[0]
        stack = "\n".join(lines[1:])
        total += 1
        counts[next(part for part, test in PARTS if test(comm, stack))] += 1
    print(f"| part of a job's life | share of samples | CPU per job ({total} samples at {hz:.0f} Hz, {jobs} jobs) |")
    print("|---|---|---|")
    for part, n in counts.most_common():
        print(f"| {part} | {n * 100 / total:.1f}% | {n / hz / jobs * 1000:.2f} ms |")


if __name__ == "__main__":
    main()
