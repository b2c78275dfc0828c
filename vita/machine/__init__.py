"""What this machine has: CPU features and thread placement, the bundled models and how setup builds them."""
