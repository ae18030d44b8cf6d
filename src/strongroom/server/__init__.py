"""The key trustee server: storage -> barrier -> logic -> api (see ARCHITECTURE)."""
