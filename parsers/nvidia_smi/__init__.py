"""nvidia-smi in every form it prints: the table, --query CSV, -q text, -q -x XML, -L/pmon/dmon and the rest; one shared core."""
