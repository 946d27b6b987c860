"""Write-ups: the LLM client (openai SDK), prompts, the extractive writer, the figure check."""
