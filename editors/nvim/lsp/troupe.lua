-- troupe: LSP client configuration for Neovim >= 0.11 (vim.lsp.config / vim.lsp.enable).
-- The server is `troupe lsp`; it starts the troupe daemon when needed.
return {
  cmd = { vim.g.troupe_bin or 'troupe', 'lsp' },
  root_markers = { '.git' },
  -- Permission requests can touch any file: attach everywhere.
  filetypes = nil,
  handlers = {
    -- The project's inbox, pushed whole at each change.
    ['troupe/inbox'] = function(...)
      return require('troupe').on_inbox(...)
    end,
    -- A run's output the person asked for (`:Troupe log`), as it is written.
    ['troupe/runLog'] = function(...)
      return require('troupe').on_run_log(...)
    end,
  },
}
