#!/usr/bin/env python3
"""Tests of scripts/perf_report.py (standard library only): python3 scripts/test_perf_report.py"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "perf_report.py")
SVG_NS = "{http://www.w3.org/2000/svg}"


def median_row(name, real_time_ns, **counters):
    """A median aggregate row as Google Benchmark writes it (suffix /manual_time, _median)."""
    full = name + "/manual_time"
    row = {"name": full + "_median", "run_name": full, "run_type": "aggregate", "repetitions": 5,
           "threads": 1, "aggregate_name": "median", "aggregate_unit": "time", "iterations": 5,
           "real_time": real_time_ns, "cpu_time": real_time_ns, "time_unit": "ns"}
    row.update(counters)
    return row


def sparse(dtype, s, a, ns, speedup, path=0):
    ideal = 3 / (1 + 2 * a)
    return median_row("cpu_ffn/%s/7b/t1/%s_a%.2f" % (dtype, s, a), ns, gbps=50.0, speedup=speedup,
                      ideal=ideal, pct_of_ideal=speedup / ideal, kept=a, path=path)


def synthetic():
    rows = [
        median_row("cpu_ffn/f32/7b/t1/dense", 12.5e6, gbps=43.2, speedup=1.0, ideal=1.0,
                   pct_of_ideal=1.0, pct_of_read=0.87),
        sparse("f32", "random", 0.05, 5.0e6, 2.5),
        sparse("f32", "random", 0.40, 8.0e6, 1.5625),
        sparse("f32", "random", 1.00, 12.6e6, 0.99, path=1),
        sparse("f32", "clustered", 0.05, 4.8e6, 2.6),
        sparse("f32", "gathered", 0.90, 12.0e6, 1.04),
        median_row("cpu_ffn/q8_0/7b/t1/dense", 3.4e6, gbps=44.0, speedup=1.0, ideal=1.0,
                   pct_of_ideal=1.0, pct_of_read=0.9),
        sparse("q8_0", "random", 0.05, 1.5e6, 2.27),
        sparse("q8_0", "random", 0.10, 1.8e6, 1.89),
        median_row("cpu_gemv/f32/7b/t1/a_pct:50/threads:1", 2.0e6, gbps=45.1, pct_of_read=0.9,
                   speedup=1.9, ideal=2.0, pct_of_ideal=0.95),
        median_row("mystery_bench/xyz", 1234.0, widgets=42.0),
    ]
    # A mean and a stddev that must be ignored.
    rows.append(dict(rows[0], name=rows[0]["run_name"] + "_mean", aggregate_name="mean", real_time=99e6))
    rows.append(dict(rows[0], name=rows[0]["run_name"] + "_stddev", aggregate_name="stddev", real_time=1.0))
    return {"context": {"date": "2024-05-01T10:00:00", "host_name": "testhost", "num_cpus": 16,
                        "mhz_per_cpu": 3000}, "benchmarks": rows}


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

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=self.dir)

    def test_report_tables_and_svg(self):
        src = self.write("bench.json", json.dumps(synthetic()))
        out = os.path.join(self.dir, "perf")
        md_file = os.path.join(self.dir, "report.md")
        r = self.run_script(src, "--out-dir", out, "--markdown", md_file)
        self.assertEqual(r.returncode, 0, r.stderr)
        md = r.stdout
        with open(md_file, encoding="utf-8") as f:
            self.assertEqual(f.read(), md)
        self.assertIn("testhost", md)
        self.assertIn("16 CPUs", md)
        self.assertIn("2024-05-01T10:00:00", md)
        self.assertIn("medians of 5 repetitions", md)
        self.assertIn("## FFN decode, 7b, 1 thread", md)
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

        svg_path = os.path.join(out, "ffn_speedup_7b_t1.svg")
        self.assertEqual(os.listdir(out), ["ffn_speedup_7b_t1.svg"])
        root = ET.parse(svg_path).getroot()
        self.assertEqual(root.tag, SVG_NS + "svg")
        self.assertIn("viewBox", root.attrib)
        polylines = root.findall(SVG_NS + "polyline")
        series = {p.get("data-dtype"): p for p in polylines if p.get("class") == "series"}
        self.assertEqual(sorted(series), ["f32", "q8_0"])
        self.assertEqual(len(series["f32"].get("points").split()), 3)  # random set only
        ideal = [p for p in polylines if p.get("class") == "ideal"]
        self.assertEqual(len(ideal), 1)
        self.assertGreaterEqual(len(ideal[0].get("points").split()), 100)
        self.assertIsNotNone(ideal[0].get("stroke-dasharray"))
        self.assertEqual(len(root.findall(SVG_NS + "line[@class='dense']")), 1)
        self.assertEqual(len(root.findall(SVG_NS + "rect[@class='clustered']")), 2)  # point + legend
        self.assertEqual(len(root.findall(SVG_NS + "polygon[@class='gathered']")), 2)
        texts = [t.text for t in root.iter(SVG_NS + "text")]
        self.assertIn("7b FFN decode, 1 thread: speed-up vs activity", texts)
        self.assertIn("f32", texts)
        self.assertIn("q8_0", texts)

    def test_deterministic(self):
        src = self.write("bench.json", json.dumps(synthetic()))
        outputs = []
        for out in ("a", "b"):
            r = self.run_script(src, "--out-dir", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(self.dir, out, "ffn_speedup_7b_t1.svg"), "rb") as f:
                outputs.append((r.stdout.replace("](%s/" % out, "]("), f.read()))
        self.assertEqual(outputs[0], outputs[1])

    def test_iteration_rows_take_median(self):
        rows = [{"name": "read_bandwidth/t1/real_time", "run_type": "iteration", "real_time": t,
                 "time_unit": "us", "gbps": g} for t, g in ((1000, 10.0), (3000, 30.0), (2000, 20.0))]
        src = self.write("iter.json", json.dumps({"context": {}, "benchmarks": rows}))
        r = self.run_script(src, "--out-dir", "svg")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| read_bandwidth/t1 | 2 | 20 |", r.stdout)
        self.assertIn("medians of 3 repetitions", r.stdout)
        self.assertIn("no SVG written", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "svg")))

    def assert_error(self, *args):
        r = self.run_script(*args)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("perf_report: error:"), r.stderr)

    def test_errors(self):
        self.assert_error(os.path.join(self.dir, "missing.json"))
        self.assert_error(self.write("bad.json", "{not json"))
        self.assert_error(self.write("empty.json", json.dumps({"context": {}, "benchmarks": []})))
        self.assert_error(self.write("list.json", "[1, 2]"))


if __name__ == "__main__":
    unittest.main()
