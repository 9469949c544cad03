-- The project's performance goals, as the targets table states them and the charts mark them.
return {
  invoke_us = 3, invoke_vs_channel = 1.5, calls_per_s = 400000, native_bytes = 256,
  rss_mb = 80, invoke_ir = 4000, echo10_ir = 15000,
}
