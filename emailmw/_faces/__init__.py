"""The routed faces over the routing core (Stem, YMP, floctrl) and gateways."""
