-- Loaded by busted (.busted's helper) once per run, before any spec file. It loads luv, if it is
-- installed, outside every file's insulation: busted drops the modules a file loaded when the file
-- ends, and luv 1.44 does not survive that (a second `require "luv"` shares the first one's loop,
-- and collecting the first module table closes and frees that loop: later runs of the loop crash
-- or stall). Loaded here, luv stays one module for the whole run, as in a program.
pcall(require, "luv")
