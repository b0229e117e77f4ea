"""`tfobs.enable`, `tfobs.disable`, `tfobs.capture_now` and `tfobs.Runtime` are loaded on
first use: first reached on several threads at once (a job's helper thread asking for a
window while the main thread enables tfobs), each thread gets its name, and none an
ImportError or Python's import "deadlock detected"."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RACE = textwrap.dedent("""
    import sys, threading
    sys.path.insert(0, sys.argv[1])
    import tfobs
    names = ["enable", "disable", "capture_now", "Runtime", "enable", "disable"]
    barrier = threading.Barrier(len(names))
    problems = []

    def reach(name):
        barrier.wait()
        try:
            if getattr(tfobs, name) is None:
                problems.append(name + ": None")
        except BaseException as exc:
            problems.append(f"{name}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=reach, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    print("; ".join(problems) or "ok", flush=True)
""")


def test_lazy_names_first_reached_on_several_threads_at_once() -> None:
    outcomes = []
    for _ in range(8):  # each race in a fresh interpreter: nothing loaded yet
        done = subprocess.run([sys.executable, "-c", RACE, ROOT], capture_output=True,
                              text=True, timeout=60)
        outcomes.append(done.stdout.strip() or done.stderr.strip()[-300:])
    assert outcomes == ["ok"] * 8, [o for o in outcomes if o != "ok"][0]


def test_a_lazy_name_in_a_fork_s_child_while_another_thread_loads_one() -> None:
    """The lock that orders the loads is a new one in a fork's child."""
    script = textwrap.dedent("""
        import os, signal, sys, threading
        sys.path.insert(0, sys.argv[1])
        import tfobs
        held, release = threading.Event(), threading.Event()

        def hold():  # another thread, inside a lazy load when the process forks
            with tfobs._lazy_lock:
                held.set()
                release.wait(30)

        threading.Thread(target=hold, daemon=True).start()
        held.wait(30)
        pid = os.fork()
        if pid == 0:
            signal.alarm(10)  # a child left waiting for the parent's holder dies of it
            tfobs.disable
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        release.set()
        print("ok" if status == 0 else f"child status {status}", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script, ROOT], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "ok", done.stderr[-500:]
