"""The fake-GPU reference DRA driver (`dpconform fakegpu-dra`)."""
