"""The Datalog rules (*.dlog): data the code reads, shipped with it."""
