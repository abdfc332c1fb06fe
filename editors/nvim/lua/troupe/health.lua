-- troupe: `:checkhealth troupe` — is the binary there, which version, is the client attached.
local M = {}

function M.check()
  vim.health.start('troupe')
  if vim.fn.has('nvim-0.11') ~= 1 then
    vim.health.error('Neovim 0.11 or newer is required (vim.lsp.config / vim.lsp.enable)')
  else
    vim.health.ok('Neovim ' .. tostring(vim.version()))
  end
  local bin = vim.g.troupe_bin or 'troupe'
  if vim.fn.executable(bin) ~= 1 then
    vim.health.error(bin .. ' not found: install troupe or set vim.g.troupe_bin')
  else
    local out = vim.fn.system({ bin, '--version' })
    vim.health.ok(vim.trim(out) .. ' (' .. vim.fn.exepath(bin) .. ')')
  end
  if require('troupe').client() then
    vim.health.ok('the troupe LSP client is attached')
  else
    vim.health.warn('the troupe LSP client is not attached to this buffer (is vim.lsp.enable("troupe") called?)')
  end
end

return M
