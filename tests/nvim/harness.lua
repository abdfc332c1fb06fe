-- The headless Neovim test drivers' shared part: check() counts, finish() writes "N passed,
-- N failed" (and the failures) to $TEST_RESULT and quits; setup() loads the plugin under test
-- ($TROUPE_PLUGIN, $TROUPE_BIN) with its LSP client rooted at $TEST_ROOT.
local M = {}
local passed, failed, notes = 0, 0, {}

function M.check(cond, what)
  if cond then
    passed = passed + 1
  else
    failed = failed + 1
    table.insert(notes, 'FAILED: ' .. what)
  end
end

function M.finish()
  local out = assert(io.open(os.getenv('TEST_RESULT'), 'w'))
  out:write(string.format('%d passed, %d failed\n', passed, failed))
  for _, n in ipairs(notes) do
    out:write(n .. '\n')
  end
  out:close()
  vim.cmd(failed == 0 and 'qa!' or 'cquit!')
end

function M.setup()
  vim.opt.rtp:prepend(os.getenv('TROUPE_PLUGIN'))
  vim.g.troupe_bin = os.getenv('TROUPE_BIN')
  vim.lsp.config('troupe', { root_dir = os.getenv('TEST_ROOT') })
  vim.cmd('runtime! plugin/troupe.lua')
end

return M
