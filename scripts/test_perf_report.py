#!/usr/bin/env python3
"""Tests of scripts/perf_report.py (standard library only): python3 scripts/test_perf_report.py

The plot checks need matplotlib in the Python that runs this file (they are skipped, with the
reason, without it); the report without matplotlib is checked with any Python, by hiding it."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "perf_report.py")
SVG_NS = "{http://www.w3.org/2000/svg}"
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None
NO_MPL = "matplotlib is not installed for %s (apt-get install python3-matplotlib)" % sys.executable
# Runs the script (argv[1]) with `import matplotlib` failing, as if it were not installed.
HIDE_MPL = ("import runpy, sys; sys.modules['matplotlib'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
SUMMARY_HEAD = ("| dtype | dense ms | pct_of_read | resident_ratio | a=0.6 | a=0.4 | a=0.2 | a=0.1 | a=0.05 "
                "| crossover |")


def median_row(name, real_time_ns, **counters):
    """A median aggregate row as Google Benchmark writes it (suffix /manual_time, _median)."""
    full = name + "/manual_time"
    row = {"name": full + "_median", "run_name": full, "run_type": "aggregate", "repetitions": 5,
           "threads": 1, "aggregate_name": "median", "aggregate_unit": "time", "iterations": 5,
           "real_time": real_time_ns, "cpu_time": real_time_ns, "time_unit": "ns"}
    row.update(counters)
    return row


def sparse(dtype, s, a, ns, speedup, path=0, threads=1, pct_of_ideal=None):
    """An FFN row of index set s at activity a; path None: no path counter; pct_of_ideal None:
    speedup / ideal, False: none."""
    ideal = 3 / (1 + 2 * a)
    c = dict(gbps=50.0, speedup=speedup, ideal=ideal, kept=a)
    if pct_of_ideal is not False:
        c["pct_of_ideal"] = speedup / ideal if pct_of_ideal is None else pct_of_ideal
    if path is not None:
        c["path"] = path
    return median_row("cpu_ffn/%s/7b/t%d/%s_a%.2f" % (dtype, threads, s, a), ns, **c)


def synthetic():
    rows = [
        median_row("cpu_ffn/f32/7b/t1/dense", 12.5e6, gbps=43.2, speedup=1.0, ideal=1.0,
                   pct_of_ideal=1.0, pct_of_read=0.87, resident_ratio=1.0),
        sparse("f32", "random", 0.05, 5.0e6, 2.5),
        sparse("f32", "random", 0.40, 8.0e6, 1.5625),
        sparse("f32", "random", 1.00, 12.6e6, 0.99, path=1),
        sparse("f32", "clustered", 0.05, 4.8e6, 2.6),
        sparse("f32", "gathered", 0.90, 12.0e6, 1.04),
        median_row("cpu_ffn/q8_0/7b/t1/dense", 3.4e6, gbps=44.0, speedup=1.0, ideal=1.0,
                   pct_of_ideal=1.0, pct_of_read=0.9),
        sparse("q8_0", "random", 0.05, 1.5e6, 2.27),
        sparse("q8_0", "random", 0.10, 1.8e6, 1.89),
        # Two threads: dtypes out of order; q4_0 without a dense row, pct_of_ideal or path;
        # q4_0_x16 with pct_of_ideal in percent; f16 reads every row from a = 0.2 up.
        sparse("q4_0_x16", "random", 0.60, 1.9e6, 1.09, path=None, threads=2, pct_of_ideal=80.0),
        median_row("cpu_ffn/q4_0_x16/7b/t2/dense", 2.0e6, speedup=1.0, resident_ratio=1.25),
        sparse("q4_0", "random", 0.20, 1.0e6, 1.5, path=None, threads=2, pct_of_ideal=False),
        sparse("f16", "random", 0.60, 6.0e6, 1.0, path=1, threads=2),
        sparse("f16", "random", 0.20, 5.0e6, 1.2, path=1, threads=2),
        sparse("f16", "random", 0.10, 2.9e6, 2.1, path=0, threads=2),
        median_row("cpu_ffn/f16/7b/t2/dense", 6.0e6, speedup=1.0, pct_of_read=1.11, resident_ratio=1.0),
        median_row("cpu_gemv/f32/7b/t1/a_pct:50/threads:1", 2.0e6, gbps=45.1, pct_of_read=0.9,
                   speedup=1.9, ideal=2.0, pct_of_ideal=0.95),
        median_row("mystery_bench/xyz", 1234.0, widgets=42.0),
    ]
    # A mean and a stddev that must be ignored.
    rows.append(dict(rows[0], name=rows[0]["run_name"] + "_mean", aggregate_name="mean", real_time=99e6))
    rows.append(dict(rows[0], name=rows[0]["run_name"] + "_stddev", aggregate_name="stddev", real_time=1.0))
    return {"context": {"date": "2024-05-01T10:00:00", "host_name": "testhost", "num_cpus": 16,
                        "mhz_per_cpu": 3000}, "benchmarks": rows}


def section(md, heading):
    """The lines of md from heading to the next heading (exclusive)."""
    lines = md.splitlines()
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return lines[start + 1:end]


class PerfReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def run_script(self, *args, hide_mpl=False):
        cmd = [sys.executable, "-c", HIDE_MPL, SCRIPT] if hide_mpl else [sys.executable, SCRIPT]
        return subprocess.run(cmd + list(args), capture_output=True, text=True, cwd=self.dir)

    def report(self, hide_mpl=False):
        """Runs the script on synthetic() with --out-dir perf --markdown report.md; returns the
        result, whose stdout is checked to equal report.md."""
        src = self.write("bench.json", json.dumps(synthetic()))
        r = self.run_script(src, "--out-dir", os.path.join(self.dir, "perf"), "--markdown",
                            os.path.join(self.dir, "report.md"), hide_mpl=hide_mpl)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.dir, "report.md"), encoding="utf-8") as f:
            self.assertEqual(f.read(), r.stdout)
        return r

    def test_report_tables(self):
        md = self.report(hide_mpl=True).stdout
        self.assertIn("testhost", md)
        self.assertIn("16 CPUs", md)
        self.assertIn("2024-05-01T10:00:00", md)
        self.assertIn("medians of 5 repetitions", md)
        self.assertIn("## FFN decode, 7b, 1 thread", md)
        self.assertIn("## FFN decode, 7b, 2 threads", md)
        # dtype | activity | set | time (ms) | GB/s | speedup | ideal | % of ideal | path | % of stream
        self.assertIn("| f32 | - | dense | 12.5 | 43.2 | 1 | 1 | 100% | - | 87% |", md)
        self.assertIn("| f32 | 0.05 | random | 5 | 50 | 2.5 | 2.73 | 91.7% | sparse | - |", md)
        self.assertIn("| f32 | 0.05 | clustered | 4.8 | 50 | 2.6 | 2.73 | 95.3% | sparse | - |", md)
        self.assertIn("| f32 | 1.00 | random | 12.6 | 50 | 0.99 | 1 | 99% | dense | - |", md)
        self.assertIn("| f32 | 0.90 | gathered | 12 | 50 | 1.04 | 1.07 | 97.1% | sparse | - |", md)
        self.assertIn("| q8_0 | 0.10 | random | 1.8 | 50 | 1.89 | 2.5 | 75.6% | sparse | - |", md)
        self.assertNotIn("| 99 |", md)  # the mean row (99 ms) is not used
        # f32 rows come before q8_0 rows, dense first, then by activity.
        self.assertLess(md.index("| f32 | - | dense"), md.index("| f32 | 0.05 | random"))
        self.assertLess(md.index("| f32 | 1.00 |"), md.index("| q8_0 | - | dense"))
        # The other rows, with their counters.
        self.assertIn("## Other rows", md)
        self.assertIn("| cpu_gemv/f32/7b/t1/a_pct:50/threads:1 | 2 |", md)
        self.assertIn("| mystery_bench/xyz | 0.00123 |", md)
        self.assertIn("widgets", md)
        self.assertIn("| 42 |", md)
        self.assertNotIn("cpu_ffn", md.split("## Other rows")[1])

    def test_summary_tables(self):
        md = self.report(hide_mpl=True).stdout
        self.assertIn("## Summary: speed-up over dense", md)
        # Before the detail tables, one per (shape, threads).
        self.assertLess(md.index("## Summary"), md.index("### 7b, 1 thread"))
        self.assertLess(md.index("### 7b, 1 thread"), md.index("### 7b, 2 threads"))
        self.assertLess(md.index("### 7b, 2 threads"), md.index("## FFN decode, 7b, 1 thread"))
        # dense ms | pct_of_read | resident_ratio | speedup (fraction of ideal) at a | crossover:
        # f32 reads every row at a = 1 only (not a column); q8_0 never (none).
        self.assertEqual(section(md, "### 7b, 1 thread"), [
            "", SUMMARY_HEAD, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            "| f32 | 12.5 | 87% | 1.00x | - | 1.56x (0.94) | - | - | 2.50x (0.92) | 1.00 |",
            "| q8_0 | 3.4 | 90% | - | - | - | - | 1.89x (0.76) | 2.27x (0.83) | none |", ""])
        # f16 first, then q4_0 (no dense row, no pct_of_ideal: bare speed-up, no path counter: -),
        # then q4_0_x16 (pct_of_ideal 80 given in percent); f16's crossover is the smallest a of
        # path 1 (0.2, listed after 0.6).
        self.assertEqual(section(md, "### 7b, 2 threads"), [
            "", SUMMARY_HEAD, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            "| f16 | 6 | 111% | 1.00x | 1.00x (0.73) | - | 1.20x (0.56) | 2.10x (0.84) | - | 0.20 |",
            "| q4_0 | - | - | - | - | - | 1.50x | - | - | - |",
            "| q4_0_x16 | 2 | - | 1.25x | 1.09x (0.80) | - | - | - | - | - |", ""])

    def test_without_matplotlib(self):
        """Tables still written, exit 0, a one-line note on stderr, no plot and no link to one."""
        r = self.report(hide_mpl=True)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("matplotlib", r.stderr)
        self.assertIn("apt-get install python3-matplotlib", r.stderr)
        self.assertIn("No plots: matplotlib is not installed", r.stdout)
        self.assertNotIn("![", r.stdout)
        self.assertIn("### 7b, 1 thread", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "perf")))

    @unittest.skipUnless(HAVE_MPL, "plot checks skipped: " + NO_MPL)
    def test_plots(self):
        r = self.report()
        self.assertEqual(r.stderr, "")
        md = r.stdout
        self.assertNotIn("No plots", md)
        out = os.path.join(self.dir, "perf")
        self.assertEqual(sorted(os.listdir(out)), ["ffn_speedup_7b_t1.png", "ffn_speedup_7b_t1.svg",
                                                   "ffn_speedup_7b_t2.png", "ffn_speedup_7b_t2.svg"])
        for name in os.listdir(out):
            self.assertGreater(os.path.getsize(os.path.join(out, name)), 1000, name)
        # The report links each PNG (relative to report.md), after its detail table.
        for t, words in ((1, "1 thread"), (2, "2 threads")):
            link = "![7b FFN speed-up, %s](perf/ffn_speedup_7b_t%d.png)" % (words, t)
            self.assertIn(link, md)
            self.assertLess(md.index("## FFN decode, 7b, %s" % words), md.index(link))
        with open(os.path.join(out, "ffn_speedup_7b_t1.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        svg_path = os.path.join(out, "ffn_speedup_7b_t1.svg")
        with open(svg_path, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("Sparse decode FFN, 7b, 1 thread: speed-up over dense", text)  # text as a comment
        self.assertIn("activity a (fraction of neurons kept)", text)
        self.assertNotIn("<dc:date>", text)
        root = ET.parse(svg_path).getroot()
        self.assertEqual(root.tag, SVG_NS + "svg")
        groups = {g.get("id"): g for g in root.iter(SVG_NS + "g") if g.get("id")}
        for gid in ("ideal", "dense", "random_f32", "random_q8_0", "clustered_f32", "gathered_f32"):
            self.assertIn(gid, groups)
        self.assertNotIn("random_q4_0", groups)  # a two-thread row
        self.assertNotIn("coalesced_f32", groups)
        # The random line's markers: f32 has 3 random rows (clustered / gathered are apart).
        self.assertEqual(len(list(groups["random_f32"].iter(SVG_NS + "use"))), 3)
        self.assertEqual(len(list(groups["random_q8_0"].iter(SVG_NS + "use"))), 2)
        ideal = next(groups["ideal"].iter(SVG_NS + "path"))
        self.assertIn("stroke-dasharray", ideal.get("style", ""))
        self.assertIn("#000000", ideal.get("style", ""))
        with open(os.path.join(out, "ffn_speedup_7b_t2.svg"), encoding="utf-8") as f:
            t2 = f.read()
        for gid in ("random_f16", "random_q4_0", "random_q4_0_x16"):
            self.assertIn('id="%s"' % gid, t2)

    def deterministic_outputs(self, plots):
        """(Markdown, {plot: bytes}) of two runs of the same input into the folders a and b."""
        src = self.write("bench.json", json.dumps(synthetic()))
        outputs = []
        for out in ("a", "b"):
            r = self.run_script(src, "--out-dir", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            files = {}
            for name in plots:
                with open(os.path.join(self.dir, out, name), "rb") as f:
                    files[name] = f.read()
            outputs.append((r.stdout.replace("](%s/" % out, "]("), files))
        return outputs

    def test_deterministic_markdown(self):
        (md_a, _), (md_b, _) = self.deterministic_outputs([])
        self.assertIn("### 7b, 1 thread", md_a)
        self.assertEqual(md_a, md_b)

    @unittest.skipUnless(HAVE_MPL, "plot bytes not compared: " + NO_MPL)
    def test_deterministic_plots(self):
        names = ["ffn_speedup_7b_t1.svg", "ffn_speedup_7b_t1.png", "ffn_speedup_7b_t2.svg"]
        (md_a, a), (md_b, b) = self.deterministic_outputs(names)
        self.assertIn("](ffn_speedup_7b_t1.png)", md_a)
        self.assertEqual(md_a, md_b)
        for name in names:
            self.assertGreater(len(a[name]), 1000, name)
            self.assertEqual(a[name], b[name], name)

    def test_iteration_rows_take_median(self):
        rows = [{"name": "read_bandwidth/t1/real_time", "run_type": "iteration", "real_time": t,
                 "time_unit": "us", "gbps": g} for t, g in ((1000, 10.0), (3000, 30.0), (2000, 20.0))]
        src = self.write("iter.json", json.dumps({"context": {}, "benchmarks": rows}))
        for hide in (False, True):  # no FFN rows: no plot, no matplotlib note
            r = self.run_script(src, "--out-dir", "svg", hide_mpl=hide)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stderr, "")
            self.assertIn("| read_bandwidth/t1 | 2 | 20 |", r.stdout)
            self.assertIn("medians of 3 repetitions", r.stdout)
            self.assertIn("no plot written", r.stdout)
            self.assertNotIn("## Summary", r.stdout)
            self.assertFalse(os.path.exists(os.path.join(self.dir, "svg")))

    def assert_error(self, *args, hide_mpl=False):
        r = self.run_script(*args, hide_mpl=hide_mpl)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("perf_report: error:"), r.stderr)

    def test_errors(self):
        for hide in (False, True):
            self.assert_error(os.path.join(self.dir, "missing.json"), hide_mpl=hide)
            self.assert_error(self.write("bad.json", "{not json"), hide_mpl=hide)
            self.assert_error(self.write("empty.json", json.dumps({"context": {}, "benchmarks": []})),
                              hide_mpl=hide)
            self.assert_error(self.write("list.json", "[1, 2]"), hide_mpl=hide)


if __name__ == "__main__":
    unittest.main(verbosity=2)
