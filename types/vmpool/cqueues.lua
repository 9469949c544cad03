---@meta vmpool.cqueues
-- LuaLS / EmmyLua definitions of require("vmpool.cqueues"), the cqueues adapter; README.md,
-- section "cqueues", is the manual.

---The cqueues adapter: pool:co_invoke and await yield in any coroutine a cqueues controller runs,
---and the controller resumes each when its own call finished.
---@class vmpool.cqueues
local cqueues_adapter = {}

---In a coroutine a cqueues controller runs, yields until the future's call finished; elsewhere
---blocks like fut:wait(). Returns the call's results (any number of coroutines may await one
---future). Errors: the call's error; not a future.
---@param fut vmpool.Future
---@return any ...
function cqueues_adapter.await(fut) end

---The adapter's state and counters: dispatching, in_flight, waiting, waits, resumes, early,
---wakeups, empty, completions, dropped, dispatchers, batched, free_conditions.
---@return table
function cqueues_adapter.stats() end

return cqueues_adapter
