"""The engine core loop: requests, sequences, the scheduler and block manager, the step loop."""
