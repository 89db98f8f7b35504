"""The user-facing API: Context, recurrent tensors, constructors and math."""
