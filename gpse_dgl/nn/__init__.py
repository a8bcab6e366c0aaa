"""Neural network modules: message-passing primitives, the GPSE encoder, PE encoders, downstream models."""
