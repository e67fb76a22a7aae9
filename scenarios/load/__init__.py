"""One module per load scenario (dpconform.scenarios.registry): its SCENARIO and its user_class()."""
