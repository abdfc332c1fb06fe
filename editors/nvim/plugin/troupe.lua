-- troupe: enables the `troupe` LSP client and defines :Troupe.
if vim.g.loaded_troupe then
  return
end
vim.g.loaded_troupe = true

vim.lsp.enable('troupe')

-- vim.lsp.enable attaches on FileType; buffers without a filetype get the client here, since a
-- permission request can concern any file.
vim.api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile' }, {
  group = vim.api.nvim_create_augroup('troupe', { clear = true }),
  callback = function(ev)
    if vim.bo[ev.buf].filetype ~= '' or vim.bo[ev.buf].buftype ~= '' then
      return
    end
    local config = vim.deepcopy(vim.lsp.config.troupe)
    config.root_dir = config.root_dir or vim.fs.root(ev.buf, config.root_markers or { '.git' })
    if type(config.root_dir) == 'string' then
      vim.lsp.start(config, { bufnr = ev.buf })
    end
  end,
})

vim.api.nvim_create_user_command('Troupe', function(opts)
  require('troupe').command(opts)
end, {
  nargs = '+',
  complete = function()
    return vim.tbl_keys(require('troupe').subcommands)
  end,
  desc = 'Troupe: inbox | launch | issue | status | agents | log | runs | plan | decide | timeline | review | comment | '
    .. 'request-changes | approve-member | pick | send | cancel | approvals | start',
})
