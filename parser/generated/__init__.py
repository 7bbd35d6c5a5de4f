"""Generated ANTLR code for the message grammar. Do not edit; run `python -m envoy_dissector.parser.regenerate`."""
