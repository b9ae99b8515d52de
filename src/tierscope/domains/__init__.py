"""Model builders for the systems tierscope knows (n-tier web stacks, ...)."""
