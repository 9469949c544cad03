---@meta vmpool.luv
-- LuaLS / EmmyLua definitions of require("vmpool.luv"), the luv (libuv) adapter; README.md,
-- section "luv: require \"vmpool.luv\"" (under "Event loops: luv (Neovim), cqueues"), is the manual.

---The luv adapter: pool:co_invoke and await yield in coroutines of spawn; the luv loop
---(uv.run, Neovim's vim.loop) resumes each when its own call finished.
---@class vmpool.luv
---@field loop table The luv module the adapter drives (vim.uv / vim.loop inside Neovim).
---@field on_error? fun(message: string) Gets the error of a spawned coroutine that failed while the loop resumed it. Default nil: raised in the loop's callback.
local luv_adapter = {}

---Runs fn(...) in a new coroutine at once, up to its first wait, and returns the coroutine.
---pool:co_invoke and await yield there. Errors: fn not a function; fn's error before its first
---wait ("vmpool: a coroutine of vmpool.luv.spawn failed: ...").
---@param fn function
---@param ... any
---@return thread
function luv_adapter.spawn(fn, ...) end

---In a coroutine of spawn, yields until the future's call finished; elsewhere blocks like
---fut:wait(). Returns the call's results (any number of coroutines may await one future). Errors:
---the call's error; not a future; the coroutine resumed by other code before the call finished.
---@param fut vmpool.Future
---@return any ...
function luv_adapter.await(fut) end

---The adapter's state and counters: watchers, in_flight, waiting, queued, waits, resumes, wakeups, empty,
---completions, dropped, early, watchers_opened, batched.
---@return table
function luv_adapter.stats() end

return luv_adapter
