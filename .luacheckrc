std = "max"
max_line_length = 120
files["spec"] = { std = "+busted" }
-- the sources given to pool:compile and init run in child states and define globals there
globals = {}
-- the editor annotations are declarations with empty bodies and one-line field docs
files["types"] = { ignore = { "212", "241", "631" } }
-- Neovim's API table, in the code that runs inside the editor
files["examples/neovim"] = { read_globals = { "vim" } }
files["spec/nvim"] = { read_globals = { "vim" } }
files["spec/install/smoke_nvim.lua"] = { read_globals = { "vim" } }
