"""Chat adapters (Discord, Telegram). They import the core; the core never imports them."""
