"""`deployctl image build`: check the AscendCloud package, hash the inputs, build or ship per host."""
