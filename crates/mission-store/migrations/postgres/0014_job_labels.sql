-- Version 14: jobs carry labels, a JSON object of strings ('{}': none).
ALTER TABLE jobs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
