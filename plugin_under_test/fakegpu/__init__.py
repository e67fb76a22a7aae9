"""The fake-GPU reference device plugin (`dpconform fakegpu`)."""
