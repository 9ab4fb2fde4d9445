-- Version 15: missions carry labels, a JSON object of strings ('{}': none).
ALTER TABLE missions ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
