"""thinc Models: the encoder, its windows, heads and weight loaders."""
