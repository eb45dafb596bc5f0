"""Many clients, servers and failures at once: scale-out, chaos, durability, the model-checked history."""
