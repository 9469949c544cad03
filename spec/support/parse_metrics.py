"""Parses a Prometheus text exposition (file named by argv[1]) with prometheus_client's parser, the
one Python exporters and tests use, and prints what it read for spec/support/prometheus.lua: one
record per sample, fields separated by 0x1f and records by 0x1e (family name, family type, sample
name, value, then label names and values). A parse error, a family that appears twice (a second
# TYPE of one name) or a series that appears twice (same name and labels) prints "ERROR: ..."."""
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:  # the spec says what to install
    print("ERROR: no prometheus_client (Debian: python3-prometheus-client): %s" % e)
    sys.exit(0)

# newline="": a raw carriage return in a label value is text, not a line break (only \n ends a line)
with open(sys.argv[1], encoding="utf-8", newline="") as f:
    text = f.read()
out = []
try:
    families, series = set(), set()
    for fam in text_string_to_metric_families(text):
        if fam.name in families:
            raise ValueError("family %s appears twice" % fam.name)
        families.add(fam.name)
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            if key in series:
                raise ValueError("duplicate series %s %s" % key)
            series.add(key)
            fields = [fam.name, fam.type, s.name, repr(float(s.value))]
            for k, v in sorted(s.labels.items()):
                fields += [k, v]
            out.append("\x1f".join(fields))
except Exception as e:  # noqa: BLE001 (any parser complaint is the answer)
    print("ERROR: %s: %s" % (type(e).__name__, e))
    sys.exit(0)
sys.stdout.write("\x1e".join(out))
