@echo off
rem Starts the WanTrainer GUI. The first run creates .venv and installs; later runs start at once.
rem Arguments go to scripts\train_ui.py, e.g. start-ui.bat --config-path my.json
cd /d "%~dp0"
if not exist .venv\Scripts\python.exe (
    python -m venv .venv || goto :error
    .venv\Scripts\python.exe -m pip install --upgrade pip || goto :error
    .venv\Scripts\python.exe -c "import torch" 2>nul || .venv\Scripts\python.exe -m pip install torch==2.13.0 || goto :error
    .venv\Scripts\python.exe -m pip install -r requirements.txt || goto :error
)
.venv\Scripts\python.exe scripts\train_ui.py %*
exit /b %errorlevel%
:error
echo Installation failed; see the messages above.
exit /b 1
