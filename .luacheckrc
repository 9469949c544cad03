std = "max"
max_line_length = 120
files["spec"] = { std = "+busted" }
-- the sources given to pool:compile and init run in child states and define globals there
globals = {}
