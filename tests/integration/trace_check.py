"""Validation of a Chrome trace-event JSON file written by `tpuw ... --trace` (docs/tracing.md).

check_trace(path) -> {(pid, tid): [(ts, dur, name, cat), ...]}: the object format with a
traceEvents list; every event has name, ph, pid, tid; metadata (ph "M") names every process and
thread that has spans; spans (ph "X") have ts >= 0 and dur >= 0, and within one track they nest
and never overlap. Raises AssertionError with the reason otherwise."""
import json


def check_trace(path):
    with open(path) as f:
        j = json.load(f)
    assert isinstance(j, dict) and isinstance(j.get("traceEvents"), list), "no traceEvents list"
    procs, threads, tracks = {}, {}, {}
    for e in j["traceEvents"]:
        for key in ("name", "ph", "pid", "tid"):
            assert key in e, f"event without {key}: {e}"
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"), e
            if e["name"] == "process_name":
                procs[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                threads[(e["pid"], e["tid"])] = e["args"]["name"]
        else:
            assert e["ph"] == "X", f"unexpected phase: {e}"
            assert e["ts"] >= 0 and e["dur"] >= 0, e
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["dur"], e["name"], e.get("cat", "")))
    for key, spans in tracks.items():
        assert key[0] in procs, f"pid {key[0]} has spans but no process_name"
        assert key in threads, f"track {key} has spans but no thread_name"
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for s in spans:
            while stack and stack[-1][0] + stack[-1][1] <= s[0] + 1e-6:
                stack.pop()
            if stack:
                top = stack[-1]
                assert s[0] + s[1] <= top[0] + top[1] + 1e-6, f"'{s[2]}' overlaps '{top[2]}' on {threads[key]}"
            stack.append(s)
    return {"procs": procs, "threads": threads, "tracks": tracks}


def names(trace, process_prefix, thread):
    """Span names on the track `thread` of the process whose name starts with `process_prefix`."""
    out = []
    for (pid, tid), spans in trace["tracks"].items():
        if trace["procs"][pid].startswith(process_prefix) and trace["threads"][(pid, tid)] == thread:
            out += [s[2] for s in spans]
    return out
